"""Stateful property test of broker.queue: random transitions against a model of each task's state.

Runs on whichever database the suite runs on (SQLite and PostgreSQL). Time never passes by
itself here: retry backoffs and delays are hours long, and a lease expires, a backoff ends or a
finished task ages only when a rule moves that one task's timestamp into the past with a test-only
UPDATE (a timestamp is not a state; the state machine still makes every move).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest
from django.conf import settings as django_settings
from django.test import override_settings
from django.utils import timezone
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from broker import queue
from broker.exceptions import InvalidTransition, LeaseMismatch, TaskNotFound, TaskNotHeld
from broker.models import CounterDelta, Event, EventWait, QueueCounter, Task, TaskError
from broker.queue import NewTask, Unique, WaitFor, events
from broker.states import COUNTERS, GAUGE_STATES, State
from tests.properties.depth import DEPTHS, machine_settings

QUEUES = ("a", "b")
HOUR_MS = 3_600_000
PAST = timedelta(days=30)


@dataclass
class Model:
    """What the test believes about one task."""

    state: str
    queue: str
    priority: int
    max_attempts: int
    available_at: datetime
    attempts: int = 0
    lease: str | None = None
    old_leases: list[str] = field(default_factory=list)
    errors: int = 0
    unique_key: str | None = None
    claimed: bool = False  # ever handed out: a unique holder no request may change
    waits: tuple[str, str] | None = None  # blocked on this event's name and key
    on_timeout: str | None = None  # the wait's, when it has a timeout
    delayed_by: bool = False  # a delay_ms it waits out once released


class TaskMachine(RuleBasedStateMachine):
    """Each step calls one queue function and tells the model what must have happened."""

    def __init__(self) -> None:
        super().__init__()
        # A fresh start per example (inside the test's transaction): no tasks, no counters.
        TaskError.objects.all().delete()
        Task.objects.all().delete()
        Event.objects.all().delete()
        QueueCounter.objects.all().delete()
        CounterDelta.objects.all().delete()
        self.tasks: dict[int, Model] = {}
        self.counters: Counter[str] = Counter()
        self.kept: set[tuple[str, str]] = set()  # events received (never pruned here)

    # -- helpers ------------------------------------------------------------------------------

    def _in(self, *states: str) -> list[int]:
        return sorted(pk for pk, t in self.tasks.items() if t.state in states)

    def _available_at(self, pk: int) -> datetime:
        return Task.objects.values_list("available_at", flat=True).get(pk=pk)

    def _fail(self, t: Model, reclaimed: bool) -> None:
        """A nack or an expired lease: the retry or bury half, as the contract says."""
        self.counters["reclaimed" if reclaimed else "nacked"] += 1
        retry = t.attempts < t.max_attempts
        self.counters["retried" if retry else "buried"] += 1
        t.state = State.DELAYED if retry else State.DEAD
        t.old_leases.append(t.lease or "")
        # A lapsed lease stays on the task, retried or buried (SQS's DeleteMessage: ack_lapsed).
        if not reclaimed:
            t.lease = None
        t.errors += 1

    def _new(self, pk: int, spec: NewTask) -> None:
        debounce = spec.unique.debounce_ms if spec.unique is not None else None
        self.tasks[pk] = Model(
            state=State.DELAYED if (spec.delay_ms or debounce) else State.READY,
            queue=spec.queue,
            priority=spec.priority,
            max_attempts=spec.max_attempts,
            available_at=self._available_at(pk),
            unique_key=spec.unique.key if spec.unique is not None else None,
        )
        self.counters["enqueued"] += 1

    def _holder(self, spec: NewTask) -> int | None:
        """The model's holder of spec's unique key: the oldest task that holds it by `until`
        (time stands still here, so "period" is: any task of the key)."""
        asked = spec.unique
        assert asked is not None
        holding = {
            "finished": (State.BLOCKED, State.DELAYED, State.READY, State.HANDED_OUT),
            "started": (State.BLOCKED, State.DELAYED, State.READY),
        }
        for pk in sorted(self.tasks):
            t = self.tasks[pk]
            if t.queue == spec.queue and t.unique_key == asked.key:
                if asked.until == "period" or t.state in holding[asked.until]:
                    return pk
        return None

    def _absorbed(self, pk: int, spec: NewTask) -> bool:
        """A holder answered spec: what it must have done to a pending holder; whether it
        replaced."""
        asked = spec.unique
        assert asked is not None
        self.counters["deduplicated"] += 1
        t = self.tasks[pk]
        if t.claimed or t.state not in (State.READY, State.DELAYED, State.BLOCKED):
            return False
        if asked.on_conflict == "replace":
            t.priority, t.max_attempts = spec.priority, spec.max_attempts
        if asked.debounce_ms is not None and t.state != State.BLOCKED:
            t.state = State.DELAYED if asked.debounce_ms else State.READY
        t.available_at = self._available_at(pk)
        return asked.on_conflict == "replace"

    # -- rules --------------------------------------------------------------------------------

    specs = st.builds(
        NewTask,
        payload=st.integers(0, 9).map(lambda n: json.dumps({"n": n})),
        max_attempts=st.integers(1, 2),  # small, so tasks reach the DLQ often
        delay_ms=st.sampled_from([0, 0, HOUR_MS]),
        queue=st.sampled_from(QUEUES),
        priority=st.integers(0, 2),
    )

    @rule(spec=specs)
    def enqueue(self, spec: NewTask) -> None:
        pk, created = queue.enqueue(spec)
        assert created and pk not in self.tasks
        self._new(pk, spec)

    @rule(specs=st.lists(specs, min_size=1, max_size=4))
    def enqueue_many(self, specs: list[NewTask]) -> None:
        pks = queue.enqueue_many(specs)
        assert len(set(pks)) == len(specs)
        for pk, spec in zip(pks, specs, strict=True):
            self._new(pk, spec)

    uniques = st.builds(
        Unique,
        key=st.sampled_from(["k1", "k2"]),
        until=st.sampled_from(["finished", "started", "period"]),
        on_conflict=st.sampled_from(["skip", "replace"]),
        debounce_ms=st.sampled_from([None, None, 0, HOUR_MS]),
    ).map(lambda u: Unique(u.key, u.until, 7200 if u.until == "period" else None,
                           u.on_conflict, u.debounce_ms))  # fmt: skip
    unique_specs = st.builds(
        NewTask,
        payload=st.integers(0, 9).map(lambda n: json.dumps({"n": n})),
        max_attempts=st.integers(1, 2),
        queue=st.sampled_from(QUEUES),
        priority=st.integers(0, 2),
        unique=uniques,
    )

    @rule(spec=unique_specs)
    def enqueue_unique(self, spec: NewTask) -> None:
        holder = self._holder(spec)
        done = queue.enqueue_answer(spec)
        if holder is None:
            assert done.created and done.pk not in self.tasks
            self._new(done.pk, spec)
            return
        assert (done.pk, done.created, done.deduplicated) == (holder, False, True)
        assert done.replaced == self._absorbed(holder, spec)

    @rule(specs=st.lists(unique_specs | specs, min_size=1, max_size=5))
    def enqueue_batch_unique(self, specs: list[NewTask]) -> None:
        holders = []
        pks, deduplicated = queue.enqueue_batch(specs)
        for pk, spec in zip(pks, specs, strict=True):
            holder = self._holder(spec) if spec.unique is not None else None
            holders.append(holder)
            if holder is None:
                assert pk not in self.tasks
                self._new(pk, spec)
            else:
                assert pk == holder
                self._absorbed(holder, spec)
        assert deduplicated == [n for n, h in enumerate(holders) if h is not None]

    @rule(limit=st.integers(1, 3), queues=st.sampled_from([None, ["a"], ["b"], ["a", "b"]]))
    def claim(self, limit: int, queues: list[str] | None) -> None:
        candidates = [
            pk for pk in self._in(State.READY) if queues is None or self.tasks[pk].queue in queues
        ]
        candidates.sort(key=lambda pk: (self.tasks[pk].priority, self.tasks[pk].available_at, pk))
        got = queue.claim(queues, lease_ms=HOUR_MS, limit=limit)
        assert sorted(d.task.pk for d in got) == sorted(candidates[:limit])
        assert len({d.lease_id for d in got}) <= 1  # one lease per claim call
        for d in got:
            t = self.tasks[d.task.pk]
            t.state, t.attempts, t.lease = State.HANDED_OUT, t.attempts + 1, d.lease_id
            t.claimed = True
            assert d.task.attempts == t.attempts
        self.counters["delivered"] += len(got)

    @precondition(lambda self: self._in(State.HANDED_OUT))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        pk = data.draw(st.sampled_from(self._in(State.HANDED_OUT)))
        t = self.tasks[pk]
        queue.ack(pk, lease_id=t.lease or "", result={"ok": pk})
        t.state = State.DONE
        t.old_leases.append(t.lease or "")
        t.lease = None
        self.counters["acked"] += 1

    @precondition(lambda self: self._in(State.HANDED_OUT))
    @rule(data=st.data(), error=st.none() | st.text(max_size=20))
    def nack(self, data: st.DataObject, error: str | None) -> None:
        pk = data.draw(st.sampled_from(self._in(State.HANDED_OUT)))
        t = self.tasks[pk]
        assert queue.nack(pk, lease_id=t.lease or "", error=error) in (State.DELAYED, State.DEAD)
        self._fail(t, reclaimed=False)
        assert Task.objects.get(pk=pk).state == t.state

    @precondition(lambda self: self._in(State.HANDED_OUT))
    @rule(data=st.data(), ack=st.booleans())
    def settle_batch(self, data: st.DataObject, ack: bool) -> None:
        """ack_many / nack_many with a held task, a repeat of it and an unknown id."""
        pk = data.draw(st.sampled_from(self._in(State.HANDED_OUT)))
        t = self.tasks[pk]
        items = [(pk, t.lease or "", None), (pk, t.lease or "", None), (None, "x", None)]
        statuses = (queue.ack_many if ack else queue.nack_many)(items)
        assert statuses == [None, TaskNotHeld, TaskNotHeld]
        if ack:
            t.state = State.DONE
            t.old_leases.append(t.lease or "")
            t.lease = None
            self.counters["acked"] += 1
        else:
            self._fail(t, reclaimed=False)

    def _come_due(
        self, data: st.DataObject, state: State, time_field: str, step: Callable[[], int]
    ) -> int:
        """Draw a task in `state`, move its `time_field` into the past, and see `step` (the
        sweeper's) move exactly that one: its id."""
        pk = data.draw(st.sampled_from(self._in(state)))
        Task.objects.filter(pk=pk).update(**{time_field: timezone.now() - PAST})  # test-only
        assert step() == 1
        return pk

    @precondition(lambda self: self._in(State.HANDED_OUT))
    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        pk = self._come_due(data, State.HANDED_OUT, "lease_deadline", queue.reclaim_expired)
        self._fail(self.tasks[pk], reclaimed=True)
        assert Task.objects.get(pk=pk).last_error == queue.LEASE_EXPIRED

    @precondition(lambda self: self._in(State.DELAYED))
    @rule(data=st.data())
    def promote(self, data: st.DataObject) -> None:
        pk = self._come_due(data, State.DELAYED, "available_at", queue.promote_delayed)
        t = self.tasks[pk]
        t.state, t.available_at = State.READY, self._available_at(pk)

    @precondition(lambda self: self.tasks)
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        pk = data.draw(st.sampled_from(sorted(self.tasks)))
        t = self.tasks[pk]
        if t.state != State.DEAD:
            with pytest.raises(TaskNotFound):
                queue.requeue(pk)
            return
        queue.requeue(pk)
        t.state, t.attempts, t.available_at = State.READY, 0, self._available_at(pk)
        t.lease = None  # a requeue is no receive of the lapsed lease: its handle deletes nothing
        self.counters["requeued"] += 1
        assert Task.objects.get(pk=pk).last_error is None

    # -- events (broker.queue.events) -------------------------------------------------------

    waits = st.builds(
        WaitFor,
        event=st.sampled_from(["paid", "approval"]),
        key=st.sampled_from(["k1", "k2"]),
        timeout_ms=st.sampled_from([None, HOUR_MS]),
        on_timeout=st.sampled_from(["cancel", "run"]),
    )

    def _released(self, pk: int, event: bool = True) -> None:
        """A blocked task's wait ended: ready, or delayed for its delay_ms."""
        t = self.tasks[pk]
        t.state = State.DELAYED if t.delayed_by else State.READY
        t.available_at, t.waits, t.on_timeout = self._available_at(pk), None, None
        self.counters["released"] += 1

    @rule(wait=waits, delay_ms=st.sampled_from([0, HOUR_MS]), q=st.sampled_from(QUEUES))
    def enqueue_waiting(self, wait: WaitFor, delay_ms: int, q: str) -> None:
        spec = NewTask(payload="1", queue=q, delay_ms=delay_ms, wait_for=wait)
        pk, created = queue.enqueue(spec)
        assert created
        self._new(pk, spec)
        t = self.tasks[pk]
        t.delayed_by = bool(delay_ms)
        if (wait.event, wait.key) not in self.kept:
            t.state, t.waits = State.BLOCKED, (wait.event, wait.key)
            t.on_timeout = wait.on_timeout if wait.timeout_ms else None
        assert (Task.objects.get(pk=pk).event is None) == (t.state == State.BLOCKED)

    @rule(name=st.sampled_from(["paid", "approval"]), key=st.sampled_from(["k1", "k2"]))
    def post_event(self, name: str, key: str) -> None:
        waiting = [pk for pk in self._in(State.BLOCKED) if self.tasks[pk].waits == (name, key)]
        posted = events.post_event(name, key, '{"n": 1}', None)
        assert posted.released == len(waiting)
        self.kept.add((name, key))
        self.counters["events"] += 1
        for pk in waiting:
            self._released(pk)

    @precondition(lambda self: self._in(State.HANDED_OUT))
    @rule(data=st.data(), wait=waits)
    def suspend(self, data: st.DataObject, wait: WaitFor) -> None:
        pk = data.draw(st.sampled_from(self._in(State.HANDED_OUT)))
        t = self.tasks[pk]
        state = events.suspend(pk, lease_id=t.lease or "", wait=wait, checkpoint='{"at": 1}')
        t.old_leases.append(t.lease or "")
        t.lease, t.attempts, t.delayed_by = None, t.attempts - 1, False
        self.counters["suspended"] += 1
        if (wait.event, wait.key) in self.kept:
            assert state == State.READY
            t.state, t.available_at = State.READY, self._available_at(pk)
            self.counters["released"] += 1
        else:
            assert state == State.BLOCKED
            t.state, t.waits = State.BLOCKED, (wait.event, wait.key)
            t.on_timeout = wait.on_timeout if wait.timeout_ms else None

    @precondition(lambda self: any(self.tasks[pk].on_timeout for pk in self._in(State.BLOCKED)))
    @rule(data=st.data())
    def wait_times_out(self, data: st.DataObject) -> None:
        timed = [pk for pk in self._in(State.BLOCKED) if self.tasks[pk].on_timeout]
        pk = data.draw(st.sampled_from(timed))
        t = self.tasks[pk]
        EventWait.objects.filter(task_id=pk).update(deadline=timezone.now() - PAST)  # test-only
        assert events.expire_waits(timezone.now()) == 1
        if t.on_timeout == "run":
            self._released(pk)
            assert Task.objects.get(pk=pk).event is None
        else:
            t.state, t.waits, t.on_timeout = State.CANCELLED, None, None
            self.counters["cancelled"] += 1

    @precondition(lambda self: self.tasks)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        pk = data.draw(st.sampled_from(sorted(self.tasks)))
        t = self.tasks[pk]
        if t.state not in (State.READY, State.DELAYED, State.HANDED_OUT, State.BLOCKED):
            with pytest.raises(InvalidTransition):
                queue.cancel(pk)
            return
        queue.cancel(pk)
        if t.lease:
            t.old_leases.append(t.lease)
        t.state, t.lease, t.waits, t.on_timeout = State.CANCELLED, None, None, None
        self.counters["cancelled"] += 1

    @precondition(lambda self: self.tasks)
    @rule(data=st.data())
    def ack_lapsed(self, data: st.DataObject) -> None:
        """The latest lease of a task reclaimed and not claimed since acks it; any other not."""
        pk = data.draw(st.sampled_from(sorted(self.tasks)))
        t = self.tasks[pk]
        lapsed = t.state in (State.READY, State.DELAYED, State.DEAD) and t.lease is not None
        lease = t.lease if lapsed else data.draw(st.sampled_from([*t.old_leases, "x" * 32]))
        assert queue.ack_lapsed([(pk, lease or "")]) == [lapsed]
        if lapsed:
            t.state, t.lease = State.DONE, None
            self.counters["acked"] += 1

    @precondition(lambda self: any(t.old_leases for t in self.tasks.values()))
    @rule(data=st.data(), verb=st.sampled_from(["ack", "nack", "extend"]))
    def stale_lease(self, data: st.DataObject, verb: str) -> None:
        """A lease that ended (acked, nacked, reclaimed, cancelled) moves nothing any more."""
        pk = data.draw(st.sampled_from(sorted(p for p, t in self.tasks.items() if t.old_leases)))
        t = self.tasks[pk]
        lease = data.draw(st.sampled_from(t.old_leases))
        expected = LeaseMismatch if t.state == State.HANDED_OUT else TaskNotFound
        with pytest.raises(expected):
            if verb == "ack":
                queue.ack(pk, lease_id=lease)
            elif verb == "nack":
                queue.nack(pk, lease_id=lease, error="late")
            else:
                queue.extend(pk, lease_id=lease, lease_ms=1000)

    @rule()
    def unknown_task(self) -> None:
        missing = max(self.tasks, default=0) + 10_000
        with pytest.raises(TaskNotFound):
            queue.cancel(missing)
        with pytest.raises(TaskNotFound):
            queue.ack(missing, lease_id="nope")

    @precondition(lambda self: self._in(State.DONE, State.CANCELLED, State.DEAD))
    @rule(data=st.data())
    def age_and_prune(self, data: st.DataObject) -> None:
        """A finished task past retention is deleted with its errors; a dead one never is."""
        pk = data.draw(st.sampled_from(self._in(State.DONE, State.CANCELLED, State.DEAD)))
        Task.objects.filter(pk=pk).update(updated_at=timezone.now() - PAST)  # test-only
        cutoff = timezone.now() - django_settings.BROKER_RETENTION
        pruned = queue.prune_finished(cutoff, limit=2).deleted
        if self.tasks[pk].state == State.DEAD:
            assert pruned == 0
            return
        assert pruned == 1
        del self.tasks[pk]
        assert not TaskError.objects.filter(task_id=pk).exists()

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def each_task_in_exactly_its_modelled_state(self) -> None:
        rows = list(
            Task.objects.values_list(
                "pk", "state", "attempts", "max_attempts", "lease_id", "lease_deadline", "priority"
            )
        )
        assert sorted(r[0] for r in rows) == sorted(self.tasks)  # one row each, none extra
        for pk, state, attempts, max_attempts, lease_id, deadline, priority in rows:
            t = self.tasks[pk]
            assert (state, attempts, lease_id) == (t.state, t.attempts, t.lease), pk
            assert (priority, max_attempts) == (t.priority, t.max_attempts), pk
            assert attempts <= max_attempts
            assert (deadline is not None) == (state == State.HANDED_OUT)
        errors = Counter(TaskError.objects.values_list("task_id", flat=True))
        assert errors == Counter({pk: t.errors for pk, t in self.tasks.items() if t.errors})

    @invariant()
    def gauges_equal_counts(self) -> None:
        overall, per_queue = queue.gauges()
        states = Counter(t.state for t in self.tasks.values())
        assert overall == {s.value: states[s] for s in GAUGE_STATES}
        for name in QUEUES:
            here = Counter(t.state for t in self.tasks.values() if t.queue == name)
            want = {s.value: here[s] for s in GAUGE_STATES}
            assert per_queue.get(name, dict.fromkeys(want, 0)) == want

    @invariant()
    def counters_match_and_balance(self) -> None:
        totals = queue.totals()
        assert totals == {name: self.counters[name] for name in COUNTERS}
        assert totals["nacked"] + totals["reclaimed"] == totals["retried"] + totals["buried"]


@pytest.mark.django_db
@pytest.mark.parametrize("thorough", DEPTHS)
def test_state_machine__random_transitions__model_gauges_and_counters_agree(thorough: bool) -> None:
    # Backoffs of an hour or more: no delayed task becomes due unless a rule says so.
    with override_settings(BROKER_RETRY_BASE_MS=HOUR_MS, BROKER_RETRY_MAX_MS=2 * HOUR_MS):
        run_state_machine_as_test(
            TaskMachine,
            settings=machine_settings(thorough, 40),
        )

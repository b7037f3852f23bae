"""Stateful property test of ordered keys: random enqueues (a few keys, some keyless), claims,
acks, nacks, lapsed leases, cancels and requeues on an ordered queue, against a model of each
key's line. After every step: no key has two tasks handed out, and a claim hands out only the
first unfinished task of its key's line (a task requeued from the DLQ goes to the end of it).
Runs on SQLite and PostgreSQL alike."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from broker import queue, queues
from broker.models import (
    CounterDelta,
    Dependency,
    KeyState,
    Queue,
    QueueCounter,
    Task,
    TaskError,
)
from broker.queue import NewTask
from broker.states import State
from tests.properties.depth import DEPTHS, machine_settings

Q = "line"
FINISHED = {State.DONE, State.DEAD, State.CANCELLED}


class Lines(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        for model in (Dependency, TaskError, Task, QueueCounter, CounterDelta, KeyState, Queue):
            model.objects.all().delete()
        queues.update(Q, {"ordered": True})
        self.lines: dict[str, list[int]] = {}
        self.key_of: dict[int, str | None] = {}
        self.leases: dict[int, str] = {}

    def _states(self) -> dict[int, str]:
        """Every task's state, in one query (a query per task made the test CPU-bound)."""
        return dict(Task.objects.values_list("pk", "state"))

    def _first_unfinished(self, key: str, states: dict[int, str]) -> int | None:
        return next((pk for pk in self.lines[key] if states[pk] not in FINISHED), None)

    @rule(key=st.sampled_from(["a", "b", "c", None]), attempts=st.integers(1, 2))
    def enqueue(self, key: str | None, attempts: int) -> None:
        pk, _ = queue.enqueue(NewTask(payload=json.dumps(key), queue=Q, key=key,
                                      max_attempts=attempts))  # fmt: skip
        self.key_of[pk] = key
        if key is not None:
            self.lines.setdefault(key, []).append(pk)

    @rule(n=st.integers(1, 3))
    def claim(self, n: int) -> None:
        got = queue.claim([Q], 60_000, limit=n)
        states = self._states()
        for d in got:
            key = self.key_of[d.task.pk]
            if key is not None:
                assert d.task.pk == self._first_unfinished(key, states), (key, self.lines[key])
            self.leases[d.task.pk] = d.lease_id

    def _held(self) -> list[int]:
        states = self._states()
        return sorted(pk for pk in self.leases if states[pk] == State.HANDED_OUT)

    @precondition(lambda self: self._held())
    @rule(data=st.data(), how=st.sampled_from(["ack", "nack", "lapse"]))
    def settle(self, data: st.DataObject, how: str) -> None:
        pk = data.draw(st.sampled_from(self._held()))
        lease = self.leases.pop(pk)
        if how == "ack":
            queue.ack(pk, lease_id=lease)
        elif how == "nack":
            queue.nack(pk, lease_id=lease, error="x")
        else:
            Task.objects.filter(pk=pk).update(lease_deadline=timezone.now() - timedelta(days=1))
            assert queue.reclaim_expired() == 1
        # A retry waits out its backoff in delayed: make it due, as the sweeper would.
        Task.objects.filter(pk=pk, state=State.DELAYED).update(available_at=timezone.now())
        queue.promote_delayed()

    @precondition(lambda self: self.key_of)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        pk = data.draw(st.sampled_from(sorted(self.key_of)))
        if self._states()[pk] not in FINISHED:
            queue.cancel(pk)
            self.leases.pop(pk, None)

    @precondition(lambda self: any(s == State.DEAD for s in Task.objects.values_list(
        "state", flat=True)))  # fmt: skip
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        dead = sorted(Task.objects.filter(state=State.DEAD).values_list("pk", flat=True))
        pk = data.draw(st.sampled_from(dead))
        queue.requeue(pk)
        key = self.key_of[pk]
        if key is not None:
            self.lines[key].remove(pk)
            self.lines[key].append(pk)

    @invariant()
    def at_most_one_of_a_key_handed_out(self) -> None:
        held = Task.objects.filter(queue=Q, state=State.HANDED_OUT, key__isnull=False)
        counts = held.values_list("key", flat=True)
        assert len(list(counts)) == len(set(counts)), list(counts)

    @invariant()
    def the_first_unfinished_of_each_line_is_not_kept_waiting(self) -> None:
        rows = list(Task.objects.values_list("pk", "state", "key_wait"))
        states = {pk: state for pk, state, _ in rows}
        waits = {pk: wait for pk, _, wait in rows}
        for key in self.lines:
            first = self._first_unfinished(key, states)
            if first is not None:
                assert waits[first] is False, (key, self.lines[key])


@pytest.mark.django_db
@pytest.mark.parametrize("thorough", DEPTHS)
def test_ordered_keys__random_operations__one_at_a_time_in_line_order(thorough: bool) -> None:
    run_state_machine_as_test(
        Lines,
        settings=machine_settings(thorough, 30),
    )

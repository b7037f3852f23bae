"""Stateful property test of dependencies: random graphs (each new task waits for a random set of
earlier ones, under a random policy) and random outcomes (ack, nack to the DLQ, cancel, requeue),
against a model. After every step each task is in the state the model says: a task is never
released early (a parent still unfinished), never twice (the `released` total), and never left
blocked once what it waits for is over. Runs on SQLite and PostgreSQL alike.

Two rules race requests on one graph: a settle or cancel of a task while tasks are enqueued
after it, and a workflow's cancel while its steps (each possibly listed before a step it waits
for) are acked. On PostgreSQL they run at once, in threads; on SQLite, which has one writer at a
time, one after another in a drawn order. Every request is answered as the contract says, none
deadlocks, and the model then holds whatever order they took."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import count

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from broker import queue
from broker.exceptions import InvalidTaskError, TaskNotHeld
from broker.models import CounterDelta, Dependency, QueueCounter, Task, TaskError, Workflow
from broker.queue import NewTask, Unique
from broker.states import State
from tests.conftest import _on_postgres
from tests.properties.depth import DEPTHS, machine_settings
from tests.properties.races import race

LIVE = (State.READY, State.DELAYED, State.HANDED_OUT, State.BLOCKED)


@dataclass
class Node:
    """What the test believes of one task."""

    queue: str
    state: str
    policy: str | None = None
    parents: list[int] = field(default_factory=list)
    satisfied: set[int] = field(default_factory=set)
    # Its state hangs on how a race went: the invariants check it, later rules never draw it
    # (Hypothesis replays a run's draws and wants them to be the same).
    raced: bool = False


class Graph(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        for model in (Dependency, TaskError, Task, Workflow, QueueCounter, CounterDelta):
            model.objects.all().delete()
        self.nodes: dict[int, Node] = {}
        self.released = 0
        self.names = count()

    # -- the model's rules, as API.md words them ---------------------------------------------

    def _finished(self, pk: int, new_state: str) -> None:
        """pk reached done, dead or cancelled: what that does to each task waiting for it."""
        self.nodes[pk].state = new_state
        cancelled: list[int] = []
        for child_pk, child in self.nodes.items():
            if pk not in child.parents or pk in child.satisfied:
                continue
            finished_ok = child.policy == "finished"
            lets_go = new_state == State.DONE or (
                finished_ok and new_state in (State.DEAD, State.CANCELLED)
            )
            if lets_go:
                child.satisfied.add(pk)
                if child.state == State.BLOCKED and child.satisfied >= set(child.parents):
                    child.state = State.READY
                    self.released += 1
            elif new_state == State.CANCELLED and child.state == State.BLOCKED:
                cancelled.append(child_pk)
        for child_pk in cancelled:
            if self.nodes[child_pk].state == State.BLOCKED:
                self._finished(child_pk, State.CANCELLED)

    def _in(self, *states: str) -> list[int]:
        return sorted(
            pk for pk, node in self.nodes.items() if node.state in states and not node.raced
        )

    def _promote(self, pk: int) -> None:
        """A nacked task with attempts left: its backoff ends now (test-only), and the sweeper's
        promotion makes it ready."""
        self.nodes[pk].state = State.DELAYED
        Task.objects.filter(pk=pk).update(available_at=Task.objects.get(pk=pk).created_at)
        assert queue.promote_delayed() == 1
        self.nodes[pk].state = State.READY

    # -- rules ----------------------------------------------------------------------------------

    @rule(data=st.data(), policy=st.sampled_from(["done", "finished"]), dies=st.booleans())
    def enqueue(self, data: st.DataObject, policy: str, dies: bool) -> None:
        known = sorted(pk for pk, node in self.nodes.items() if not node.raced)
        after = (
            data.draw(st.lists(st.sampled_from(known), unique=True, max_size=3)) if known else []
        )
        name = f"g{next(self.names)}"
        spec = NewTask(payload=json.dumps(name), queue=name, max_attempts=1 if dies else 2,
                       after=tuple(after), after_policy=policy)  # fmt: skip
        impossible = policy == "done" and any(self.nodes[p].state == State.CANCELLED for p in after)
        if impossible:
            with pytest.raises(InvalidTaskError):
                queue.enqueue(spec)
            return
        pk, _ = queue.enqueue(spec)
        node = Node(queue=name, state=State.READY, policy=policy if after else None)
        node.parents = list(after)
        finished_ok = policy == "finished"
        for p in after:
            parent = self.nodes[p].state
            if parent == State.DONE or (finished_ok and parent in (State.DEAD, State.CANCELLED)):
                node.satisfied.add(p)
        if set(after) - node.satisfied:
            node.state = State.BLOCKED
        self.nodes[pk] = node

    @rule(
        data=st.data(),
        key=st.integers(0, 1),
        replace=st.booleans(),
        debounce=st.sampled_from([None, 0]),
    )
    def enqueue_unique(
        self, data: st.DataObject, key: int, replace: bool, debounce: int | None
    ) -> None:
        """A unique task of its own queue (a throttle: one task per key for ever here). The
        second and later are answered by the first, blocked or not, which absorbs them (a
        debounce of 0 keeps a blocked holder's delay at 0): nothing about its waiting changes."""
        name = f"uq{key}"
        holder = next((pk for pk, node in self.nodes.items() if node.queue == name), None)
        known = sorted(pk for pk, node in self.nodes.items() if not node.raced)
        after = (
            data.draw(st.lists(st.sampled_from(known), unique=True, max_size=2)) if known else []
        )
        unique = Unique(f"k{key}", "period", 86_400, "replace" if replace else "skip", debounce)
        spec = NewTask(payload=json.dumps(name), queue=name, after=tuple(after),
                       after_policy="finished", unique=unique)  # fmt: skip
        done = queue.enqueue_answer(spec)
        if holder is not None:
            assert (done.pk, done.created, done.deduplicated) == (holder, False, True)
            return
        assert done.created
        node = Node(queue=name, state=State.READY, policy="finished" if after else None)
        node.parents = list(after)
        for p in after:
            if self.nodes[p].state in (State.DONE, State.DEAD, State.CANCELLED):
                node.satisfied.add(p)
        if set(after) - node.satisfied:
            node.state = State.BLOCKED
        self.nodes[done.pk] = node

    @precondition(lambda self: self._in(State.READY))
    @rule(data=st.data(), outcome=st.sampled_from(["ack", "nack"]))
    def work(self, data: st.DataObject, outcome: str) -> None:
        pk = data.draw(st.sampled_from(self._in(State.READY)))
        (d,) = queue.claim([self.nodes[pk].queue], 60_000)
        assert d.task.pk == pk
        assert all(self.nodes[p.pk].state == p.state for p in d.parents)
        if outcome == "ack":
            queue.ack(pk, lease_id=d.lease_id, result=pk)
            self._finished(pk, State.DONE)
        elif queue.nack(pk, lease_id=d.lease_id, error="x") == State.DEAD:
            self._finished(pk, State.DEAD)
        else:
            self._promote(pk)

    @precondition(lambda self: self._in(*LIVE))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        pk = data.draw(st.sampled_from(self._in(*LIVE)))
        queue.cancel(pk)
        self._finished(pk, State.CANCELLED)

    @precondition(lambda self: self._in(State.DEAD))
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        pk = data.draw(st.sampled_from(self._in(State.DEAD)))
        queue.requeue(pk)
        self.nodes[pk].state = State.READY

    # -- races ----------------------------------------------------------------------------------

    @precondition(lambda self: self._in(State.READY))
    @rule(
        data=st.data(),
        how=st.sampled_from(["ack", "ack_many", "nack", "cancel"]),
        policy=st.sampled_from(["done", "finished"]),
        producers=st.integers(1, 3),
        each=st.integers(1, 4),
    )
    def settle_while_enqueued_after(
        self, data: st.DataObject, how: str, policy: str, producers: int, each: int
    ) -> None:
        """A held task is settled (or cancelled) while producers enqueue tasks after it and
        after a ready `anchor` (so none is released in the race): the settle is answered at its
        first call, and each child made is as if enqueued before or after it."""
        pk = data.draw(st.sampled_from(self._in(State.READY)))
        (d,) = queue.claim([self.nodes[pk].queue], 60_000)
        self.nodes[pk].state = State.HANDED_OUT
        anchor_name = f"g{next(self.names)}"
        anchor = queue.enqueue(NewTask(payload="0", queue=anchor_name))[0]
        self.nodes[anchor] = Node(queue=anchor_name, state=State.READY)
        names = [[f"g{next(self.names)}" for _ in range(each)] for _ in range(producers)]
        made: list[tuple[int, str]] = []
        ended: list[str] = []

        def produce(names: list[str]) -> None:
            for name in names:
                spec = NewTask(payload="1", queue=name, after=(pk, anchor), after_policy=policy)
                try:
                    made.append((queue.enqueue(spec)[0], name))
                except InvalidTaskError:  # after the cancel: under "done" it could never run
                    assert (how, policy) == ("cancel", "done")

        def settle() -> None:
            if how == "ack":
                queue.ack(pk, lease_id=d.lease_id, result=pk)
            elif how == "ack_many":
                assert queue.ack_many([(pk, d.lease_id, None)]) == [None]
            elif how == "nack":
                ended.append(queue.nack(pk, lease_id=d.lease_id, error="x"))
                return
            else:
                queue.cancel(pk)
            ended.append(State.CANCELLED if how == "cancel" else State.DONE)

        race(data, [settle, *(lambda n=n: produce(n) for n in names)])
        # Under "done", a cancel first refuses the enqueues after it: which ones made a child
        # hangs on the race.
        raced = (how, policy) == ("cancel", "done")
        for child, name in made:
            self.nodes[child] = Node(name, State.BLOCKED, policy, [pk, anchor], raced=raced)
        if ended == [State.DELAYED]:
            self._promote(pk)
        else:
            self._finished(pk, ended[0])

    @rule(data=st.data(), size=st.integers(2, 6))
    def workflow_cancel_while_steps_acked(self, data: st.DataObject, size: int) -> None:
        """DELETE /workflows/{id} while some of its held steps are acked: each ack is a 204 (it
        came first) or a 404 (the cancel did), and the cancel ends every step left."""
        rank = data.draw(st.permutations(range(size)))  # a step waits only for earlier ranks
        waits = {
            i: data.draw(st.lists(st.sampled_from([j for j in range(size) if rank[j] < rank[i]]),
                                  unique=True, max_size=2))
            if rank[i] else []
            for i in range(size)
        }  # fmt: skip
        policies = {i: data.draw(st.sampled_from(["done", "finished"])) for i in range(size)}
        names = {i: f"g{next(self.names)}" for i in range(size)}
        listed = data.draw(st.permutations(range(size)))  # a step may come before its parents
        steps = [
            (f"s{i}", NewTask(payload=str(i), queue=names[i]), tuple(f"s{j}" for j in waits[i]),
             policies[i])
            for i in listed
        ]  # fmt: skip
        workflow, tasks = queue.enqueue_graph("race", steps)
        ids = {i: tasks[f"s{i}"] for i in range(size)}
        for i in range(size):
            parents = [ids[j] for j in waits[i]]
            state = State.BLOCKED if parents else State.READY
            policy = policies[i] if parents else None
            # Which acks came first, and so each step's end, hangs on the race.
            self.nodes[ids[i]] = Node(names[i], state, policy, parents, raced=True)
        held = {}
        for i in range(size):
            if not waits[i]:
                (d,) = queue.claim([names[i]], 60_000)
                held[ids[i]] = d.lease_id
                self.nodes[ids[i]].state = State.HANDED_OUT
        acking = data.draw(st.lists(st.sampled_from(sorted(held)), unique=True))
        batched = data.draw(st.booleans())
        answers: dict[int, object] = {}
        moved: list[int] = []

        def ack(pk: int) -> None:
            if batched:
                answers[pk] = queue.ack_many([(pk, held[pk], pk)])[0]
                return
            try:
                queue.ack(pk, lease_id=held[pk], result=pk)
                answers[pk] = None
            except TaskNotHeld:
                answers[pk] = TaskNotHeld

        race(
            data,
            [lambda: moved.append(queue.cancel_steps(workflow)),
             *(lambda pk=pk: ack(pk) for pk in acking)],
        )  # fmt: skip
        assert set(answers.values()) <= {None, TaskNotHeld}
        for pk in sorted(pk for pk, answer in answers.items() if answer is None):
            self._finished(pk, State.DONE)
        live = [pk for pk in ids.values() if self.nodes[pk].state in LIVE]
        assert moved == [len(live)]
        for pk in live:  # all at once: a blocked step among them is cancelled, not released
            self.nodes[pk].state = State.CANCELLED
        for pk in live:
            self._finished(pk, State.CANCELLED)

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def every_task_in_its_modelled_state(self) -> None:
        found = dict(Task.objects.values_list("pk", "state"))
        assert found == {pk: node.state for pk, node in self.nodes.items()}

    @invariant()
    def released_once_each_and_gauges_agree(self) -> None:
        totals = queue.totals()
        assert totals["released"] == self.released
        blocked = sum(node.state == State.BLOCKED for node in self.nodes.values())
        assert queue.gauges()[0]["blocked"] == blocked
        assert totals["nacked"] + totals["reclaimed"] == totals["retried"] + totals["buried"]


# On PostgreSQL the race rules' threads, on connections of their own, must see what the machine
# wrote: committed, not in the test's transaction. On SQLite the races run one after another.
@pytest.mark.django_db(transaction=_on_postgres())
@pytest.mark.parametrize("thorough", DEPTHS)
def test_dependencies__random_graphs_and_outcomes__released_exactly_when_due(
    thorough: bool,
) -> None:
    run_state_machine_as_test(
        Graph,
        settings=machine_settings(thorough, 40),
    )

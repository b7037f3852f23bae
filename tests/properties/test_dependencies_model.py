"""Stateful property test of dependencies: random graphs (each new task waits for a random set of
earlier ones, under a random policy) and random outcomes (ack, nack to the DLQ, cancel, requeue),
against a model. After every step each task is in the state the model says: a task is never
released early (a parent still unfinished), never twice (the `released` total), and never left
blocked once what it waits for is over. Runs on SQLite and PostgreSQL alike."""

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
from broker.exceptions import InvalidTaskError
from broker.models import CounterDelta, Dependency, QueueCounter, Task, TaskError
from broker.queue import NewTask
from broker.states import State
from tests.properties.depth import DEPTHS, machine_settings

LIVE = (State.READY, State.DELAYED, State.HANDED_OUT, State.BLOCKED)


@dataclass
class Node:
    """What the test believes of one task."""

    queue: str
    state: str
    policy: str | None = None
    parents: list[int] = field(default_factory=list)
    satisfied: set[int] = field(default_factory=set)


class Graph(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        for model in (Dependency, TaskError, Task, QueueCounter, CounterDelta):
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
        return sorted(pk for pk, node in self.nodes.items() if node.state in states)

    # -- rules ----------------------------------------------------------------------------------

    @rule(data=st.data(), policy=st.sampled_from(["done", "finished"]), dies=st.booleans())
    def enqueue(self, data: st.DataObject, policy: str, dies: bool) -> None:
        known = sorted(self.nodes)
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
            self.nodes[pk].state = State.DELAYED
            Task.objects.filter(pk=pk).update(available_at=Task.objects.get(pk=pk).created_at)
            assert queue.promote_delayed() == 1
            self.nodes[pk].state = State.READY

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


@pytest.mark.django_db
@pytest.mark.parametrize("thorough", DEPTHS)
def test_dependencies__random_graphs_and_outcomes__released_exactly_when_due(
    thorough: bool,
) -> None:
    run_state_machine_as_test(
        Graph,
        settings=machine_settings(thorough, 40),
    )

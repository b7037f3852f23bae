"""Dependencies through broker.queue: blocked at enqueue, released by the move that finishes the
last parent (in its transaction), cascades of cancels, both policies, on either database."""

from __future__ import annotations

import json
from typing import Any

import pytest

from broker import queue
from broker.exceptions import InvalidTaskError
from broker.models import Dependency, Task
from broker.queue import NewTask
from broker.states import State
from tests.conftest import Clock

pytestmark = pytest.mark.django_db


_queues = iter(range(1_000_000))


def new(after: tuple[int, ...] = (), policy: str = "done", **fields: Any) -> int:
    """A task (waiting for `after` under `policy`), in a queue of its own unless told; its id."""
    payload = json.dumps(fields.pop("payload", {"n": 1}))
    fields.setdefault("queue", f"q{next(_queues)}")
    pk, created = queue.enqueue(
        NewTask(payload=payload, after=after, after_policy=policy, **fields)
    )
    assert created
    return pk


def state(pk: int) -> str:
    return Task.objects.get(pk=pk).state


def take(pk: int) -> str:
    """Claim task pk (from its own queue); its lease."""
    (d,) = queue.claim([Task.objects.get(pk=pk).queue], 60_000)
    assert d.task.pk == pk
    return d.lease_id


def finish(pk: int, how: str, clock: Clock | None = None) -> None:
    """Move a ready task on: ack (done), nack of its last attempt (dead), cancel."""
    if how == "cancel":
        queue.cancel(pk)
        return
    lease = take(pk)
    if how == "ack":
        queue.ack(pk, lease_id=lease, result={"from": pk})
    else:
        assert how == "dead"
        assert queue.nack(pk, lease_id=lease, error="boom") == State.DEAD


def test_enqueue__after_unfinished__blocked_counted_enqueued_and_gauged(moved) -> None:
    parent = new()
    child = new(after=(parent,))
    assert state(child) == State.BLOCKED
    assert Task.objects.get(pk=child).blockers == 1
    assert moved() == {"enqueued": 2}
    overall, per_queue = queue.gauges()
    assert (overall["blocked"], overall["ready"]) == (1, 1)
    assert per_queue[Task.objects.get(pk=child).queue]["blocked"] == 1
    assert [d.task.pk for d in queue.claim(None, 1000, limit=10)] == [parent]


def test_enqueue__after_already_done__ready_at_once() -> None:
    parent = new()
    finish(parent, "ack")
    child = new(after=(parent,))
    assert state(child) == State.READY
    assert Dependency.objects.get(child_id=child).satisfied


def test_ack_of_the_last_parent__releases_the_child_counted_released(moved) -> None:
    a, b = new(), new()
    child = new(after=(a, b))
    finish(a, "ack")
    assert (state(child), Task.objects.get(pk=child).blockers) == (State.BLOCKED, 1)
    finish(b, "ack")
    assert state(child) == State.READY
    assert moved()["released"] == 1
    assert queue.gauges()[0]["blocked"] == 0


def test_release__delay_counted_from_the_release(clock: Clock) -> None:
    parent = new()
    child = new(after=(parent,), delay_ms=60_000)
    clock.advance(3_600_000)  # an hour later: the delay has not started yet
    finish(parent, "ack")
    task = Task.objects.get(pk=child)
    assert task.state == State.DELAYED
    assert abs((task.available_at - clock.now()).total_seconds() - 60) < 1


def test_delivery__after_and_parents_with_their_results() -> None:
    a, b = new(), new()
    child = new(after=(b, a))
    finish(a, "ack")
    finish(b, "ack")
    (d,) = queue.claim([Task.objects.get(pk=child).queue], 1000)
    assert d.task.pk == child
    assert [(p.pk, p.state, json.loads(p.result)) for p in d.parents] == [
        (b, "done", {"from": b}),
        (a, "done", {"from": a}),
    ]


def test_done_policy__parent_dead__stays_blocked_until_requeued_and_done() -> None:
    parent = new(max_attempts=1)
    child = new(after=(parent,))
    finish(parent, "dead")
    assert state(child) == State.BLOCKED
    queue.requeue(parent)
    assert state(child) == State.BLOCKED
    finish(parent, "ack")
    assert state(child) == State.READY


@pytest.mark.parametrize("how", ["ack", "dead", "cancel"])
def test_finished_policy__any_end_of_the_parent__releases(how: str) -> None:
    parent = new(max_attempts=1)
    child = new(after=(parent,), policy="finished")
    finish(parent, how)
    assert state(child) == State.READY


def test_finished_policy__parent_dead_then_requeued_and_done__released_once(moved) -> None:
    parent = new(max_attempts=1)
    child = new(after=(parent,), policy="finished")
    finish(parent, "dead")
    assert state(child) == State.READY
    queue.requeue(parent)
    finish(parent, "ack")
    assert state(child) == State.READY
    assert moved()["released"] == 1


def test_cancel__cascades_down_done_waits_releases_finished_ones(moved) -> None:
    root = new()
    child = new(after=(root,))
    grandchild = new(after=(child,))
    cleanup = new(after=(child,), policy="finished")
    other = new()
    both = new(after=(root, other), policy="finished")
    queue.cancel(root)
    assert [state(pk) for pk in (child, grandchild, cleanup, both)] == [
        State.CANCELLED, State.CANCELLED, State.READY, State.BLOCKED,
    ]  # fmt: skip
    assert moved() == {"enqueued": 6, "cancelled": 3, "released": 1}
    assert queue.gauges()[0]["blocked"] == 1


def test_cancel__a_blocked_task__cancelled_with_its_cascade() -> None:
    parent = new()
    child = new(after=(parent,))
    grandchild = new(after=(child,))
    queue.cancel(child)
    assert (state(parent), state(child), state(grandchild)) == (
        State.READY, State.CANCELLED, State.CANCELLED,
    )  # fmt: skip


def test_reclaim_to_dead__releases_finished_dependants(clock: Clock) -> None:
    parent = new(max_attempts=1)
    child = new(after=(parent,), policy="finished")
    take(parent)
    clock.advance(61_000)
    assert queue.reclaim_expired() == 1
    assert (state(parent), state(child)) == (State.DEAD, State.READY)


def test_batch_settle__acks_parents_of_one_child_together__released_once(moved) -> None:
    parents = [new() for _ in range(3)]
    child = new(after=tuple(parents))
    got = queue.claim(None, 60_000, limit=10)
    assert queue.ack_many([(d.task.pk, d.lease_id, None) for d in got]) == [None] * 3
    assert state(child) == State.READY
    assert moved()["released"] == 1


def test_enqueue__unknown_repeated_or_cancelled_parent__invalid_naming_it() -> None:
    parent = new()
    gone = new()
    queue.cancel(gone)
    with pytest.raises(InvalidTaskError) as unknown:
        new(after=(parent, 999_999))
    assert unknown.value.fields == {"after.1": ["No such task."]}
    with pytest.raises(InvalidTaskError) as cancelled:
        new(after=(gone,))
    assert list(cancelled.value.fields) == ["after.0"]
    assert Task.objects.get(pk=parent).children == 0  # the failed enqueues left nothing
    assert new(after=(gone,), policy="finished")  # a clean-up of a cancelled task may run


def test_enqueue_many__after_in_items__blocked_and_named_by_index() -> None:
    parent = new()
    ids = queue.enqueue_many([NewTask(payload="1"), NewTask(payload="2", after=(parent,))])
    assert [state(pk) for pk in ids] == [State.READY, State.BLOCKED]
    with pytest.raises(InvalidTaskError) as bad:
        queue.enqueue_many([NewTask(payload="1"), NewTask(payload="2", after=(0,))], "jobs.{}.")
    assert bad.value.fields == {"jobs.1.after.0": ["No such task."]}


def test_release__one_parent_of_many_children__all_released(moved) -> None:
    parent = new()
    children = [new(after=(parent,)) for _ in range(20)]
    finish(parent, "ack")
    assert {state(pk) for pk in children} == {State.READY}
    assert moved()["released"] == 20


@pytest.mark.parametrize(("parents", "children"), [(1000, 1), (1, 1000)])
def test_release__big_shapes__the_last_ack_releases_all_in_one_statement(
    parents: int, children: int
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    tops = queue.enqueue_many([NewTask(payload="0") for _ in range(parents)])
    ours = queue.enqueue_many([NewTask(payload="1", after=tuple(tops)) for _ in range(children)])
    assert Dependency.objects.count() == parents * children
    held = []
    while got := queue.claim(None, 60_000, limit=100):
        held += got
    *first, last = held
    for start in range(0, len(first), 500):
        chunk = first[start : start + 500]
        assert queue.ack_many([(d.task.pk, d.lease_id, None) for d in chunk]) == [None] * len(chunk)
    assert set(Task.objects.filter(pk__in=ours).values_list("state", flat=True)) == {"blocked"}

    with CaptureQueriesContext(connection) as acked:
        queue.ack(last.task.pk, lease_id=last.lease_id)

    assert set(Task.objects.filter(pk__in=ours).values_list("state", flat=True)) == {"ready"}
    if connection.vendor == "postgresql":
        assert len(acked.captured_queries) == 1  # one round trip, however many it releases


@pytest.mark.postgres
def test_ack_of_a_parent__whether_a_dependant_has_a_lower_id__one_index_probe() -> None:
    """The settle's statement asks whether a task waiting for the one it acks has a lower id
    (then it would lock out of order: sqlrelease.in_one_statement) in one probe of
    dependency_parent_idx, not by reading every dependency row of a parent of thousands."""
    from django.db import connection

    from broker.queue import sql
    from tests.conftest import explain

    parent = new()
    queue.enqueue_many([NewTask(payload="1", after=(parent,)) for _ in range(50)])
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    plan = explain(sql.ACK_ONE, id=parent, lease_id="x" * 32, body=None, locked=False)
    assert "dependency_parent_idx" in plan, plan
    assert "Index Cond: ((parent_id = t.id) AND (child_id < " in plan, plan

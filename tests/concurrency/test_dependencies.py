"""Dependencies under real concurrency on PostgreSQL: parents of one child settled at the same
instant, a child enqueued while its parent is being acked, overlapping batch settles. A child is
released exactly once, never early, never left blocked."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from broker import queue
from broker.models import Task
from broker.queue import NewTask
from broker.states import State
from tests.concurrency.conftest import in_thread
from tests.conftest import assert_invariant

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROUNDS = 15


def _at_once(actions: list[Callable[[], None]]) -> None:
    """Run each action in its own thread, all released by one barrier; raise what any raised."""
    go = threading.Barrier(len(actions))
    errors: list[BaseException] = []

    def gated(action: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            go.wait()
            action()

        return run

    threads = [in_thread(gated(action), errors) for action in actions]
    for thread in threads:
        thread.join(30)
    assert not errors, errors[0]


def _held(n: int, name: str) -> list[tuple[int, str]]:
    """n tasks of queue `name`, handed out: (id, lease)."""
    queue.enqueue_many([NewTask(payload="0", queue=name) for _ in range(n)])
    return [(d.task.pk, d.lease_id) for d in queue.claim([name], 60_000, limit=n)]


@pytest.mark.parametrize("how", ["ack", "ack_many", "nack_to_dead"])
def test_parents_of_one_child_settled_at_once__released_exactly_once(how: str) -> None:
    released_before = queue.totals()["released"]
    for n in range(ROUNDS):
        parents = _held(6, f"p{n}")
        policy = "finished" if how == "nack_to_dead" else "done"
        (child,) = queue.enqueue_many(
            [NewTask(payload="1", queue=f"c{n}", after=tuple(p for p, _ in parents),
                     after_policy=policy)]
        )  # fmt: skip
        if how == "ack":
            actions = [
                lambda p=p, lease=lease: queue.ack(p, lease_id=lease) for p, lease in parents
            ]
        elif how == "ack_many":
            actions = [lambda p=p, lease=lease: queue.ack_many([(p, lease, None)])
                       for p, lease in parents]  # fmt: skip
        else:
            for p, _ in parents:
                Task.objects.filter(pk=p).update(max_attempts=1)
            actions = [lambda p=p, lease=lease: queue.nack(p, lease_id=lease, error="x")
                       for p, lease in parents]  # fmt: skip
        _at_once(actions)
        child_row = Task.objects.get(pk=child)
        assert (child_row.state, child_row.blockers) == (State.READY, 0), n
    assert queue.totals()["released"] - released_before == ROUNDS
    assert queue.gauges()[0]["blocked"] == 0
    assert_invariant()


def test_child_enqueued_while_its_parent_is_acked__never_left_blocked() -> None:
    """The race a settle's one statement guards against (sqlrelease.in_one_statement): an
    enqueue that names the parent commits between the settle's snapshot and its lock on it."""
    for n in range(ROUNDS * 4):
        ((parent, lease),) = _held(1, f"r{n}")
        children: list[int] = []

        def enqueue_child(parent: int = parent, n: int = n, into: list[int] = children) -> None:
            pk, _ = queue.enqueue(NewTask(payload="1", queue=f"rc{n}", after=(parent,)))
            into.append(pk)

        _at_once([lambda p=parent, lease=lease: queue.ack(p, lease_id=lease), enqueue_child])
        assert Task.objects.get(pk=parent).state == State.DONE
        assert Task.objects.get(pk=children[0]).state == State.READY, n
    assert queue.gauges()[0]["blocked"] == 0
    assert_invariant()


def test_overlapping_batch_settles__no_deadlock_each_child_released_once() -> None:
    for n in range(ROUNDS):
        parents = _held(8, f"o{n}")
        ids = [p for p, _ in parents]
        # Each child waits for one parent of each half, so both settles reach every child.
        specs = [NewTask(payload="1", queue=f"oc{n}", after=(ids[i], ids[7 - i])) for i in range(4)]
        children = queue.enqueue_many(specs)
        first = [(p, lease, None) for p, lease in parents[:4]]
        second = [(p, lease, None) for p, lease in reversed(parents[4:])]
        _at_once([lambda items=items: queue.ack_many(items) for items in (first, second)])
        assert set(Task.objects.filter(pk__in=children).values_list("state", flat=True)) == {
            State.READY
        }
    assert_invariant()

"""Requests on one graph at the same instant, on PostgreSQL with real threads: a settle or cancel
of a parent while producers keep enqueuing tasks `after` it, and a workflow's cancel while its
steps are acked. Each is answered as the contract says (204, 404, 409), never a deadlock, and no
child is left blocked or released twice."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial

import pytest
from rest_framework.test import APIClient

from broker import queue
from broker.exceptions import InvalidTaskError, LeaseMismatch, TaskNotHeld
from broker.models import Task
from broker.queue import NewTask
from broker.states import State
from tests.concurrency.conftest import in_thread
from tests.conftest import assert_invariant

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

PRODUCERS = 4
ROUNDS = 6


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
        thread.join(60)
    assert not errors, errors[0]


def _held(name: str, max_attempts: int = 3) -> tuple[int, str]:
    """A task of queue `name`, handed out: (id, lease)."""
    queue.enqueue(NewTask(payload="0", queue=name, max_attempts=max_attempts))
    (delivery,) = queue.claim([name], 60_000)
    return delivery.task.pk, delivery.lease_id


def _under_enqueues(
    after: tuple[int, ...], policy: str, name: str, settle: Callable[[], None]
) -> list[int]:
    """Run `settle` while PRODUCERS threads enqueue tasks `after` those as fast as they can
    (from before it starts until after it returns); the children made. Under "done", an
    enqueue refused for a cancelled parent (400) makes none."""
    children: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            spec = NewTask(payload="1", queue=name, after=after, after_policy=policy)
            try:
                children.append(queue.enqueue(spec)[0])
            except InvalidTaskError:
                assert policy == "done"

    producers = [in_thread(produce, errors) for _ in range(PRODUCERS)]
    deadline = time.monotonic() + 10
    while len(children) < 4 * PRODUCERS and time.monotonic() < deadline and not errors:
        time.sleep(0.001)  # the producers are in full swing
    try:
        settle()
    finally:
        time.sleep(0.02)  # and go on a moment after
        stop.set()
        for thread in producers:
            thread.join(30)
    assert not errors, errors[0]
    return children


def _settle(how: str, parent: tuple[int, str], other: tuple[int, str], into: list[object]) -> None:
    """Settle (or cancel) the handed-out `parent` by `how` (through the API for http_*), with
    `other` in the same batch; its answer to `into`."""
    (p, lease), (o, o_lease) = parent, other
    client = APIClient()
    if how == "ack":
        into.append(queue.ack(p, lease_id=lease))
    elif how == "nack_to_dead":
        into.append(queue.nack(p, lease_id=lease, error="x"))
    elif how == "ack_many":
        into.append(queue.ack_many([(o, o_lease, None), (p, lease, 1)]))
    elif how == "settle_mixed":
        into.append([a.error for a in queue.settle([(p, lease, None)], [(o, o_lease, "y")])])
    elif how == "cancel":
        into.append(queue.cancel(p))
    elif how == "http_ack":
        into.append(client.post(f"/jobs/{p}/ack?lease_id={lease}").status_code)
    elif how == "http_claim_with_acks":
        acks = [{"id": str(p), "lease_id": lease}, {"id": str(o), "lease_id": o_lease}]
        body = {"acks": acks, "wait_ms": 0, "queues": ["empty"]}  # the claim takes nothing
        r = client.post("/jobs/claim", body, format="json")
        into.append([item["status"] for item in r.json()["results"]])
    else:
        assert how == "http_cancel", how
        into.append(client.delete(f"/jobs/{p}").status_code)


@pytest.mark.parametrize(
    "how",
    ["ack", "nack_to_dead", "ack_many", "settle_mixed", "cancel", "http_ack",
     "http_claim_with_acks", "http_cancel"],
)  # fmt: skip
def test_settle_of_a_parent__while_tasks_are_enqueued_after_it__answered_and_children_released(
    how: str,
) -> None:
    """An enqueue names the parent between the settle's snapshot and its lock, again and again:
    the settle still moves the parent at its first call, and every child made before or after
    it is released (none left blocked)."""
    released_before = queue.totals()["released"]
    made = 0
    for n in range(ROUNDS):
        parent, other = _held(f"p{n}", max_attempts=1), _held(f"o{n}")
        policy = "finished" if how in ("nack_to_dead", "cancel", "http_cancel") else "done"
        answers: list[object] = []
        children = _under_enqueues(
            (parent[0],),
            policy,
            f"c{n}",
            partial(_settle, how, parent, other, answers),
        )
        expected = {
            "ack_many": [None, None],
            "settle_mixed": [None, None],
            "nack_to_dead": "dead",
            "http_ack": 204,
            "http_claim_with_acks": [204, 204],
            "http_cancel": 204,
        }
        assert answers == [expected.get(how)]  # answered at the first call
        ended = State.CANCELLED if how.endswith("cancel") else State.DONE
        ended = State.DEAD if how == "nack_to_dead" else ended
        assert Task.objects.get(pk=parent[0]).state == ended
        states = dict(Task.objects.filter(pk__in=children).values_list("pk", "state"))
        assert set(states.values()) == {State.READY}, (n, len(children))
        made += len(children)
    assert queue.totals()["released"] - released_before <= made
    assert queue.gauges()[0]["blocked"] == 0
    assert_invariant()


def _pairs(n: int, name: str) -> tuple[int, list[tuple[int, str]], list[int]]:
    """A workflow of n pairs, each step `b` listed before the step `a` it waits for: (its id,
    the a steps handed out as (id, lease), the b steps)."""
    steps = []
    for i in range(n):
        steps.append((f"b{i}", NewTask(payload="1", queue=f"{name}b"), (f"a{i}",), "done"))
        steps.append((f"a{i}", NewTask(payload="0", queue=f"{name}a"), (), "done"))
    workflow, tasks = queue.enqueue_graph(name, steps)
    held = [(d.task.pk, d.lease_id) for d in queue.claim([f"{name}a"], 60_000, limit=n)]
    assert len(held) == n
    return workflow, held, [tasks[f"b{i}"] for i in range(n)]


def _acks(part: list[tuple[int, str]], batched: bool, answers: list[object]) -> None:
    """Ack the (id, lease) pairs of `part`, in one batch or one by one; each answer to
    `answers`: None (204), TaskNotHeld (404) or LeaseMismatch (409)."""
    if batched:
        answers.extend(queue.ack_many([(p, lease, None) for p, lease in part]))
        return
    for p, lease in part:
        try:
            queue.ack(p, lease_id=lease)
            answers.append(None)
        except (TaskNotHeld, LeaseMismatch) as exc:
            answers.append(type(exc))


@pytest.mark.parametrize("batched", [False, True], ids=["one_by_one", "in_batches"])
def test_workflow_cancel__while_its_steps_are_acked__no_deadlock_every_answer_as_the_contract(
    batched: bool,
) -> None:
    """DELETE /workflows/{id} locks the steps it cancels while each ack locks its step, then
    the step waiting for it, which was listed (so stored) first."""
    for n in range(ROUNDS * 2):
        workflow, held, waiting = _pairs(150, f"w{n}")
        answers: list[object] = []
        cancelled: list[int] = []
        _at_once(
            [*(partial(_acks, held[i::4], batched, answers) for i in range(4)),
             lambda w=workflow, into=cancelled: into.append(queue.cancel_steps(w))]
        )  # fmt: skip
        assert set(answers) <= {None, TaskNotHeld}, set(answers)
        states = dict(Task.objects.filter(workflow_id=workflow).values_list("pk", "state"))
        done = sum(state == State.DONE for state in states.values())
        assert done == answers.count(None)  # each ack answered 204 is a step done
        assert cancelled == [len(states) - done]  # every other step cancelled by the DELETE
        assert all(states[b] == State.CANCELLED for b in waiting)
    assert queue.gauges()[0]["blocked"] == 0
    assert_invariant()


@pytest.mark.parametrize("batched", [False, True], ids=["ack_each", "ack_many"])
def test_settle_releasing_a_lower_child__while_enqueues_name_it_and_a_higher_task__no_deadlock(
    batched: bool,
) -> None:
    """Parents a1 < c < a2, c waiting for a1: a settle of a1 and a2 locks c last, and each
    enqueue after [c, a2] locks c, then a2."""
    for n in range(ROUNDS * 2):
        a1 = queue.enqueue(NewTask(payload="0", queue=f"a{n}"))[0]
        c = queue.enqueue(NewTask(payload="1", queue=f"c{n}", after=(a1,)))[0]
        queue.enqueue(NewTask(payload="0", queue=f"a{n}"))
        held = [(d.task.pk, d.lease_id) for d in queue.claim([f"a{n}"], 60_000, limit=2)]
        answers: list[object] = []
        _under_enqueues((c, held[1][0]), "done", f"x{n}", partial(_acks, held, batched, answers))
        assert answers == [None, None]
        assert Task.objects.get(pk=c).state == State.READY
    assert_invariant()


def test_cancel_cascade_two_levels__enqueues_after_grandchild_and_child__no_deadlock() -> None:
    """t, then c1 and g (after c1) and c2, both c after t: the cascade of t's cancel locks c1 and
    c2, then g; each enqueue after [g, c2] locks g, then c2."""
    for n in range(ROUNDS * 2):
        t = queue.enqueue(NewTask(payload="0", queue=f"t{n}"))[0]
        c1 = queue.enqueue(NewTask(payload="1", queue=f"c{n}", after=(t,)))[0]
        g = queue.enqueue(NewTask(payload="2", queue=f"g{n}", after=(c1,)))[0]
        c2 = queue.enqueue(NewTask(payload="3", queue=f"c{n}", after=(t,)))[0]
        children = _under_enqueues((g, c2), "finished", f"x{n}", partial(queue.cancel, t))
        assert set(Task.objects.filter(pk__in=[t, c1, g, c2]).values_list("state", flat=True)) == {
            State.CANCELLED
        }
        assert set(Task.objects.filter(pk__in=children).values_list("state", flat=True)) == {
            State.READY
        }
    assert_invariant()


def test_requeue_of_dead_parents__while_enqueues_name_several_of_them__no_deadlock() -> None:
    """A requeue out of the DLQ locks its dead tasks in id order; each enqueue after several of
    them, named in any order, locks them in id order too."""
    for n in range(ROUNDS):
        queue.enqueue_many([NewTask(payload="0", queue=f"d{n}", max_attempts=1) for _ in range(8)])
        dead = []
        for d in queue.claim([f"d{n}"], 60_000, limit=8):
            assert queue.nack(d.task.pk, lease_id=d.lease_id, error="x") == State.DEAD
            dead.append(d.task.pk)
        named = tuple(reversed(dead))  # highest id first
        children = _under_enqueues(named, "done", f"x{n}", partial(queue.requeue_many, dead))
        assert set(Task.objects.filter(pk__in=dead).values_list("state", flat=True)) == {
            State.READY
        }
        assert set(Task.objects.filter(pk__in=children).values_list("state", flat=True)) == {
            State.BLOCKED
        }
    assert_invariant()

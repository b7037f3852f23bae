"""queue.reclaim_expired and queue.promote_delayed: the sweeper's moves."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from broker import queue
from broker.exceptions import TaskNotFound
from broker.models import Task, TaskError
from broker.states import State
from broker.sweeper import sweep_once

pytestmark = pytest.mark.django_db

Moved = Callable[[], dict[str, int]]


def test_reclaim__expired_with_attempts_left__delayed_lease_expired(
    enqueue_task, claim_one, clock, moved: Moved
) -> None:
    pk = enqueue_task(max_attempts=2)
    claim_one(lease_ms=1000)
    clock.advance(1001)
    before = clock.now()
    assert queue.reclaim_expired() == 1
    after = clock.now()
    task = Task.objects.get(pk=pk)
    assert (task.state, task.attempts, task.last_error) == (State.DELAYED, 1, "lease expired")
    # The lapsed lease's id stays (SQS's DeleteMessage with it still deletes: ack_lapsed).
    assert task.lease_id is not None and (task.lease_deadline, task.worker) == (None, None)
    # The first retry's backoff: between 0.5 s and 1 s.
    assert before + timedelta(milliseconds=500) <= task.available_at
    assert task.available_at <= after + timedelta(milliseconds=1000)
    assert list(TaskError.objects.values_list("attempt", "error")) == [(1, "lease expired")]
    assert moved() == {"enqueued": 1, "delivered": 1, "reclaimed": 1, "retried": 1}


def test_reclaim__expired_last_attempt__dead(enqueue_task, claim_one, clock, moved) -> None:
    pk = enqueue_task(max_attempts=1)
    claim_one(lease_ms=1000)
    clock.advance(1001)
    assert queue.reclaim_expired() == 1
    task = Task.objects.get(pk=pk)
    assert (task.state, task.last_error) == (State.DEAD, "lease expired")
    assert moved() == {"enqueued": 1, "delivered": 1, "reclaimed": 1, "buried": 1}


def test_reclaim__lease_not_expired__left_alone(enqueue_task, claim_one, clock, moved) -> None:
    pk = enqueue_task()
    claim_one(lease_ms=1000)
    clock.advance(900)  # leaves the real time the test itself takes
    assert queue.reclaim_expired() == 0
    assert Task.objects.get(pk=pk).state == State.HANDED_OUT
    assert moved() == {"enqueued": 1, "delivered": 1}


def test_reclaim__old_lease_then_acks__404(enqueue_task, claim_one, clock) -> None:
    pk = enqueue_task()
    d = claim_one(lease_ms=1000)
    clock.advance(2000)
    queue.reclaim_expired()
    with pytest.raises(TaskNotFound):
        queue.ack(pk, lease_id=d.lease_id)


def test_reclaim__limit__moves_at_most_that_many(enqueue_task, claim_one, clock, moved) -> None:
    for _ in range(3):
        enqueue_task()
    queue.claim(None, 1000, limit=3)
    clock.advance(2000)
    assert queue.reclaim_expired(limit=2) == 2
    assert queue.reclaim_expired(limit=2) == 1
    assert moved() == {"enqueued": 3, "delivered": 3, "reclaimed": 3, "retried": 3}


def test_promote__due__ready_and_claimable_no_counter(enqueue_task, clock, moved) -> None:
    due = enqueue_task(delay_ms=1000)
    later = enqueue_task(delay_ms=5000)
    clock.advance(1000)
    assert queue.promote_delayed() == 1
    assert Task.objects.get(pk=due).state == State.READY
    assert Task.objects.get(pk=later).state == State.DELAYED
    assert moved() == {"enqueued": 2}
    assert [d.task.pk for d in queue.claim(None, 1000, limit=5)] == [due]


def test_promote__nothing_due__zero(enqueue_task) -> None:
    enqueue_task(delay_ms=60_000)
    assert queue.promote_delayed() == 0


def test_sweep_once__reclaims_then_promotes(enqueue_task, claim_one, clock) -> None:
    pk = enqueue_task()
    claim_one(lease_ms=1000)
    clock.advance(1001)
    assert sweep_once().reclaimed == 1
    clock.advance(2000)
    assert sweep_once().promoted == 1
    assert Task.objects.get(pk=pk).state == State.READY


def test_lifecycle__nack_reclaim_bury_requeue_ack__counters_agree(
    enqueue_task, claim_one, nack_retried, clock, moved: Moved
) -> None:
    pk = enqueue_task(max_attempts=3)
    nack_retried(pk, "one")
    claim_one(lease_ms=1000)
    clock.advance(60_000)
    queue.reclaim_expired()
    clock.advance(60_000)
    queue.promote_delayed()
    queue.nack(pk, lease_id=claim_one().lease_id, error="three")
    queue.requeue(pk)
    queue.ack(pk, lease_id=claim_one().lease_id, result="fine")
    task = Task.objects.get(pk=pk)
    assert (task.state, task.attempts, task.result) == (State.DONE, 1, '"fine"')
    assert list(TaskError.objects.values_list("attempt", "error")) == [
        (1, "one"),
        (2, "lease expired"),
        (3, "three"),
    ]
    assert moved() == {
        "enqueued": 1,
        "delivered": 4,
        "nacked": 2,
        "reclaimed": 1,
        "retried": 2,
        "buried": 1,
        "requeued": 1,
        "acked": 1,
    }


def test_gauges__count_live_states_overall_and_per_queue(enqueue_task, claim_one) -> None:
    enqueue_task(queue="a")
    enqueue_task(queue="a")
    enqueue_task(queue="b", delay_ms=60_000)
    claim_one(queues=["a"])
    overall, per_queue = queue.gauges()
    assert overall == {"ready": 1, "handed_out": 1, "delayed": 1, "dead": 0, "blocked": 0}
    assert per_queue == {
        "a": {"ready": 1, "handed_out": 1, "delayed": 0, "dead": 0, "blocked": 0},
        "b": {"ready": 0, "handed_out": 0, "delayed": 1, "dead": 0, "blocked": 0},
    }


@pytest.mark.django_db(transaction=True)
def test_sweep__enqueued_inside_a_caller_transaction__counts_folded_totals_unchanged() -> None:
    from django.db import transaction

    import broker
    from broker.models import CounterDelta

    with transaction.atomic():
        broker.enqueue({"n": 1}, queue="app")
        broker.enqueue({"n": 2}, queue="app", delay_ms=60_000)
    before = queue.stats()
    assert before["totals"]["enqueued"] == 2
    assert before["queues"]["app"] == {
        "ready": 1, "handed_out": 0, "delayed": 1, "dead": 0, "blocked": 0,
    }  # fmt: skip
    assert CounterDelta.objects.count() > 0
    sweep_once()
    assert CounterDelta.objects.count() == 0
    assert queue.stats() == before


def test_sweep__claim_notes_older_than_waiting_reads__pruned() -> None:
    from datetime import timedelta

    from broker.claimers import EVERY_QUEUE
    from broker.models import ClaimScope
    from broker.queue.base import current_time
    from contract.limits import WORKERS_SEEN_S

    now = current_time()
    ClaimScope.objects.create(scope="old", seen_at=now - timedelta(seconds=WORKERS_SEEN_S + 1))
    ClaimScope.objects.create(scope="recent", seen_at=now - timedelta(seconds=WORKERS_SEEN_S - 5))
    ClaimScope.objects.create(scope=EVERY_QUEUE, seen_at=now)
    sweep_once()
    assert set(ClaimScope.objects.values_list("scope", flat=True)) == {"recent", EVERY_QUEUE}


def test_prune__a_workflow_whose_steps_were_all_pruned__removed_others_kept(clock) -> None:
    from datetime import timedelta

    from broker.models import Task, Workflow
    from broker.queue import NewTask
    from broker.sweeper import prune

    gone, _ = queue.enqueue_graph("old", [("a", NewTask(payload="1", queue="pw"), (), "done")])
    kept, _ = queue.enqueue_graph("live", [("a", NewTask(payload="1", queue="pw"), (), "done")])
    (d,) = queue.claim(["pw"], 1000)
    queue.ack(d.task.pk, lease_id=d.lease_id)
    Task.objects.filter(workflow_id=gone).update(updated_at=clock.now() - timedelta(days=30))
    Workflow.objects.update(created_at=clock.now() - timedelta(days=30))
    assert prune() == 1
    assert list(Workflow.objects.values_list("pk", flat=True)) == [kept]


def test_pending__each_move_with_work__its_flag_alone(enqueue_task, claim_one, clock) -> None:
    from broker import schedules
    from broker.models import CounterDelta, Schedule

    def flags() -> tuple[bool, ...]:
        return tuple(queue.pending(clock.now()))

    assert flags() == (False, False, False, False, False)
    enqueue_task()  # inside the test's transaction: its counts go as deltas, folded later
    assert CounterDelta.objects.exists()
    assert flags() == (False, False, False, True, False)
    queue.fold_deltas()
    assert flags() == (False, False, False, False, False)
    claim_one(lease_ms=1000)
    enqueue_task(delay_ms=5000)
    queue.fold_deltas()
    assert flags() == (False, False, False, False, False)
    clock.advance(1001)
    assert flags() == (True, False, False, False, False)
    queue.reclaim_expired()  # its backoff ends within a second; the other task's delay at 5 s
    clock.advance(4000)
    assert flags() == (False, True, False, False, False)
    queue.promote_delayed()
    schedules.create({"name": "s", "every_s": 60, "job": {"payload": {}}})
    queue.fold_deltas()
    assert flags() == (False, False, False, False, False)
    Schedule.objects.update(next_run_at=clock.now())
    assert flags() == (False, False, True, False, False)
    Schedule.objects.update(paused=True)
    assert flags() == (False, False, False, False, False)


def test_sweep__idle__one_statement(django_assert_num_queries) -> None:
    sweep_once()  # the housekeeping of an idle sweep once a second: its statements are its own
    with django_assert_num_queries(1):
        sweep_once(housekeeping=False)

"""Moves for SQS messages: release, no backoff, unlimited attempts, purge, receive limits."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker import queue
from broker.exceptions import LeaseMismatch, TaskNotHeld
from broker.models import Task, TaskError
from broker.queue.deadletters import MAX_KEPT_ERRORS
from broker.queue.redelivery import RELEASED
from broker.states import State

pytestmark = pytest.mark.django_db

Moved = Callable[[], dict[str, int]]


def _sqs_task(enqueue_task, **fields) -> int:
    fields.setdefault("max_attempts", None)
    pk: int = enqueue_task(backoff=False, **fields)
    return pk


def test_release__held__ready_at_once_counted_reclaimed_retried(
    enqueue_task, claim_one, clock, moved: Moved
) -> None:
    pk = _sqs_task(enqueue_task)
    d = claim_one()
    queue.release(pk, lease_id=d.lease_id)
    task = Task.objects.get(pk=pk)
    # The released lease's id stays: its receipt handle still deletes the message (ack_lapsed).
    assert (task.state, task.attempts, task.lease_id, task.last_error) == (
        State.READY,
        1,
        d.lease_id,
        RELEASED,
    )
    assert task.available_at <= clock.now()
    assert list(TaskError.objects.values_list("attempt", "error")) == [(1, RELEASED)]
    assert moved() == {"enqueued": 1, "delivered": 1, "reclaimed": 1, "retried": 1}
    assert claim_one().task.attempts == 2


def test_release__backoff_task__ready_at_once_too(enqueue_task, claim_one, moved: Moved) -> None:
    pk = enqueue_task(max_attempts=3)
    queue.release(pk, lease_id=claim_one().lease_id)
    assert Task.objects.get(pk=pk).state == State.READY
    assert moved() == {"enqueued": 1, "delivered": 1, "reclaimed": 1, "retried": 1}


def test_release__last_attempt__dead(enqueue_task, claim_one, moved: Moved) -> None:
    pk = _sqs_task(enqueue_task, max_attempts=1)
    queue.release(pk, lease_id=claim_one().lease_id)
    assert Task.objects.get(pk=pk).state == State.DEAD
    assert moved() == {"enqueued": 1, "delivered": 1, "reclaimed": 1, "buried": 1}


def test_release__other_lease_or_not_held__409_or_404(enqueue_task, claim_one) -> None:
    pk = _sqs_task(enqueue_task)
    d = claim_one()
    with pytest.raises(LeaseMismatch):
        queue.release(pk, lease_id="other")
    queue.release(pk, lease_id=d.lease_id)
    with pytest.raises(TaskNotHeld):
        queue.release(pk, lease_id=d.lease_id)


def test_release_many__mixed_items__each_answered_in_order(enqueue_task, claim_one) -> None:
    a, b = _sqs_task(enqueue_task), _sqs_task(enqueue_task)
    da, db = claim_one(), claim_one()
    got = queue.release_many(
        [(a, da.lease_id), (a, da.lease_id), (b, "other"), (None, "x"), (b, db.lease_id)]
    )
    assert got == [None, TaskNotHeld, LeaseMismatch, TaskNotHeld, None]
    assert set(Task.objects.values_list("state", flat=True)) == {State.READY}


def test_reclaim__no_backoff__ready_at_once(enqueue_task, claim_one, clock, moved: Moved) -> None:
    pk = _sqs_task(enqueue_task)
    claim_one(lease_ms=1000)
    clock.advance(1001)
    assert queue.reclaim_expired() == 1
    task = Task.objects.get(pk=pk)
    assert (task.state, task.last_error) == (State.READY, "lease expired")
    assert task.available_at <= clock.now()
    assert moved() == {"enqueued": 1, "delivered": 1, "reclaimed": 1, "retried": 1}


def test_reclaim__unlimited_attempts__never_dead(enqueue_task, claim_one, clock) -> None:
    pk = _sqs_task(enqueue_task)
    for attempt in range(1, 6):
        assert claim_one(lease_ms=1000).task.attempts == attempt
        clock.advance(1001)
        assert queue.reclaim_expired() == 1
    assert Task.objects.get(pk=pk).state == State.READY


def test_reclaim__unlimited_attempts__error_history_bounded(enqueue_task, claim_one, clock) -> None:
    pk = _sqs_task(enqueue_task)
    Task.objects.filter(pk=pk).update(attempts=MAX_KEPT_ERRORS + 5)
    TaskError.objects.bulk_create(
        TaskError(task_id=pk, attempt=n, at=clock.now(), error="old")
        for n in range(MAX_KEPT_ERRORS + 5)
    )
    claim_one(lease_ms=1000)
    clock.advance(1001)
    queue.reclaim_expired()
    errors = list(TaskError.objects.filter(task_id=pk).values_list("error", flat=True))
    assert len(errors) == MAX_KEPT_ERRORS
    assert errors[-1] == "lease expired"


def test_nack__no_backoff__delayed_until_now(enqueue_task, claim_one, clock, moved) -> None:
    pk = _sqs_task(enqueue_task)
    queue.nack(pk, lease_id=claim_one().lease_id, error="boom")
    task = Task.objects.get(pk=pk)
    assert task.state == State.DELAYED
    assert task.available_at <= clock.now()
    assert queue.promote_delayed() == 1
    assert moved() == {"enqueued": 1, "delivered": 1, "nacked": 1, "retried": 1}


def test_nack__unlimited_attempts__retried_past_a_hundred(enqueue_task, claim_one) -> None:
    pk = _sqs_task(enqueue_task)
    Task.objects.filter(pk=pk).update(attempts=250)
    assert queue.nack(pk, lease_id=claim_one().lease_id) == State.DELAYED
    assert Task.objects.get(pk=pk).attempts == 251


def test_enqueue_many__sqs_fields__stored(enqueue_task) -> None:
    specs = [
        queue.NewTask(payload="1", max_attempts=None, backoff=False, queue="s"),
        queue.NewTask(payload="2", max_attempts=7, backoff=False, queue="s"),
        queue.NewTask(payload="3"),
    ]
    ids = queue.enqueue_many(specs)
    got = list(
        Task.objects.filter(pk__in=ids).order_by("pk").values_list("max_attempts", "backoff")
    )
    assert got == [(None, False), (7, False), (3, True)]


def test_cancel_queue__live_tasks_of_that_queue__cancelled(
    enqueue_task, claim_one, moved: Moved
) -> None:
    held = _sqs_task(enqueue_task, queue="p")
    claim_one(queues=["p"])
    dead = _sqs_task(enqueue_task, queue="p", max_attempts=1)
    queue.nack(dead, lease_id=claim_one(queues=["p"]).lease_id)
    ready = _sqs_task(enqueue_task, queue="p")
    delayed = _sqs_task(enqueue_task, queue="p", delay_ms=60_000)
    other = _sqs_task(enqueue_task, queue="q")
    before = moved()
    assert queue.cancel_queue("p") == 3
    states = dict(Task.objects.values_list("pk", "state"))
    assert [states[pk] for pk in (held, ready, delayed)] == [State.CANCELLED] * 3
    assert (states[dead], states[other]) == (State.DEAD, State.READY)
    assert moved()["cancelled"] - before.get("cancelled", 0) == 3
    assert queue.cancel_queue("p") == 0


def test_limit_receives__sqs_messages_only__changed(enqueue_task) -> None:
    sqs = _sqs_task(enqueue_task, queue="r")
    native = enqueue_task(queue="r", max_attempts=3)
    assert queue.limit_receives("r", 5) == 1
    assert Task.objects.get(pk=sqs).max_attempts == 5
    assert Task.objects.get(pk=native).max_attempts == 3
    queue.limit_receives("r", None)
    assert Task.objects.get(pk=sqs).max_attempts is None


@pytest.mark.postgres
def test_claim__unlimited_attempts_at_smallint_max__saturates(enqueue_task, claim_one) -> None:
    pk = _sqs_task(enqueue_task)
    Task.objects.filter(pk=pk).update(attempts=32767)
    assert claim_one().task.attempts == 32767

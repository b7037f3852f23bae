"""queue.ack, queue.nack and queue.extend: the moves out of handed_out, and the lease guard."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone

from broker import queue
from broker.exceptions import LeaseMismatch, TaskNotFound
from broker.models import Task, TaskError
from broker.states import State

pytestmark = pytest.mark.django_db

Moved = Callable[[], dict[str, int]]


def errors_of(pk: int) -> list[tuple[int, str]]:
    return list(TaskError.objects.filter(task_id=pk).values_list("attempt", "error"))


# -- ack --------------------------------------------------------------------------------------


def test_ack__held_lease__done_with_result(enqueue_task, claim_one, moved: Moved) -> None:
    pk = enqueue_task()
    d = claim_one()
    queue.ack(pk, lease_id=d.lease_id, result={"lines": ["ok", "é\u0000"]})
    task = Task.objects.get(pk=pk)
    assert task.state == State.DONE
    assert json.loads(task.result) == {"lines": ["ok", "é\u0000"]}
    assert (task.lease_id, task.lease_deadline, task.worker) == (None, None, None)
    assert task.attempts == 1
    assert moved() == {"enqueued": 1, "delivered": 1, "acked": 1}


def test_ack__no_result__result_stays_none(enqueue_task, claim_one) -> None:
    pk = enqueue_task()
    queue.ack(pk, lease_id=claim_one().lease_id)
    assert Task.objects.get(pk=pk).result is None


def test_ack__wrong_lease__409_and_nothing_moves(enqueue_task, claim_one, moved: Moved) -> None:
    pk = enqueue_task()
    d = claim_one()
    with pytest.raises(LeaseMismatch):
        queue.ack(pk, lease_id="not-the-lease")
    assert Task.objects.get(pk=pk).state == State.HANDED_OUT
    assert moved() == {"enqueued": 1, "delivered": 1}
    queue.ack(pk, lease_id=d.lease_id)


def test_ack__unknown_task__404(moved: Moved) -> None:
    with pytest.raises(TaskNotFound):
        queue.ack(987_654, lease_id="x")
    assert moved() == {}


def test_ack__ready_task__404(enqueue_task) -> None:
    pk = enqueue_task()
    with pytest.raises(TaskNotFound):
        queue.ack(pk, lease_id="x")
    assert Task.objects.get(pk=pk).state == State.READY


def test_ack__twice__second_404(enqueue_task, claim_one, moved: Moved) -> None:
    pk = enqueue_task()
    d = claim_one()
    queue.ack(pk, lease_id=d.lease_id)
    with pytest.raises(TaskNotFound):
        queue.ack(pk, lease_id=d.lease_id)
    assert moved() == {"enqueued": 1, "delivered": 1, "acked": 1}


# -- nack -------------------------------------------------------------------------------------


def test_nack__attempts_left__delayed_by_first_backoff(
    enqueue_task, claim_one, moved: Moved
) -> None:
    pk = enqueue_task(max_attempts=3)
    d = claim_one()
    before = timezone.now()
    assert queue.nack(pk, lease_id=d.lease_id, error="boom") == State.DELAYED
    after = timezone.now()
    task = Task.objects.get(pk=pk)
    assert (task.state, task.attempts, task.last_error) == (State.DELAYED, 1, "boom")
    assert before + timedelta(milliseconds=500) <= task.available_at
    assert task.available_at <= after + timedelta(milliseconds=1000)
    assert (task.lease_id, task.lease_deadline, task.worker) == (None, None, None)
    assert errors_of(pk) == [(1, "boom")]
    assert moved() == {"enqueued": 1, "delivered": 1, "nacked": 1, "retried": 1}


@pytest.mark.parametrize(
    ("k", "low_ms", "high_ms"), [(1, 500, 1000), (2, 1000, 2000), (3, 2000, 4000), (4, 4000, 8000)]
)
def test_nack__kth_failure__waits_half_to_all_of_2_pow_k_minus_1_seconds(
    enqueue_task, claim_one, clock, k: int, low_ms: int, high_ms: int
) -> None:
    pk = enqueue_task(max_attempts=10)
    for _ in range(k - 1):
        queue.nack(pk, lease_id=claim_one().lease_id, error="again")
        clock.advance(60_000)
        assert queue.promote_delayed() == 1
    d = claim_one()
    before = clock.now()
    queue.nack(pk, lease_id=d.lease_id, error="again")
    after = clock.now()
    available_at = Task.objects.get(pk=pk).available_at
    assert before + timedelta(milliseconds=low_ms) <= available_at
    assert available_at <= after + timedelta(milliseconds=high_ms)


def test_nack__last_attempt__dead_with_error(enqueue_task, claim_one, moved: Moved) -> None:
    pk = enqueue_task(max_attempts=1)
    d = claim_one()
    assert queue.nack(pk, lease_id=d.lease_id, error="fatal") == State.DEAD
    task = Task.objects.get(pk=pk)
    assert (task.state, task.attempts, task.last_error) == (State.DEAD, 1, "fatal")
    assert errors_of(pk) == [(1, "fatal")]
    assert moved() == {"enqueued": 1, "delivered": 1, "nacked": 1, "buried": 1}


def test_nack__every_attempt__each_error_kept(enqueue_task, claim_one, clock, moved) -> None:
    pk = enqueue_task(max_attempts=3)
    for n in range(3):
        queue.nack(pk, lease_id=claim_one().lease_id, error=f"failure {n + 1}")
        clock.advance(60_000)
        queue.promote_delayed()
    task = Task.objects.get(pk=pk)
    assert (task.state, task.last_error) == (State.DEAD, "failure 3")
    assert errors_of(pk) == [(1, "failure 1"), (2, "failure 2"), (3, "failure 3")]
    assert moved() == {
        "enqueued": 1,
        "delivered": 3,
        "nacked": 3,
        "retried": 2,
        "buried": 1,
    }


def test_nack__no_error_given__a_placeholder_is_kept(enqueue_task, claim_one) -> None:
    pk = enqueue_task()
    queue.nack(pk, lease_id=claim_one().lease_id)
    assert errors_of(pk) == [(1, queue.NO_ERROR_GIVEN)]


def test_nack__wrong_lease__409_and_nothing_moves(enqueue_task, claim_one, moved) -> None:
    pk = enqueue_task()
    claim_one()
    with pytest.raises(LeaseMismatch):
        queue.nack(pk, lease_id="nope", error="x")
    assert Task.objects.get(pk=pk).state == State.HANDED_OUT
    assert errors_of(pk) == []
    assert moved() == {"enqueued": 1, "delivered": 1}


@pytest.mark.parametrize("state", ["unknown", "ready", "delayed"])
def test_nack__not_handed_out__404(enqueue_task, state: str, moved: Moved) -> None:
    pk = 987_654 if state == "unknown" else enqueue_task(delay_ms=60_000 * (state == "delayed"))
    with pytest.raises(TaskNotFound):
        queue.nack(pk, lease_id="x", error="x")
    assert not TaskError.objects.exists()
    assert moved() == ({} if state == "unknown" else {"enqueued": 1})


def test_nack__error_with_nul__kept_with_replacement_char(enqueue_task, claim_one) -> None:
    pk = enqueue_task()
    queue.nack(pk, lease_id=claim_one().lease_id, error="a\x00b")
    assert errors_of(pk) == [(1, "a\ufffdb")]
    assert Task.objects.get(pk=pk).last_error == "a\ufffdb"


# -- extend -----------------------------------------------------------------------------------


def test_extend__held_lease__deadline_moves_nothing_else(enqueue_task, claim_one, moved) -> None:
    pk = enqueue_task()
    d = claim_one(lease_ms=1000)
    before = timezone.now()
    deadline = queue.extend(pk, lease_id=d.lease_id, lease_ms=120_000)
    task = Task.objects.get(pk=pk)
    assert task.lease_deadline == deadline >= before + timedelta(seconds=120)
    assert (task.state, task.attempts, task.lease_id) == (State.HANDED_OUT, 1, d.lease_id)
    assert moved() == {"enqueued": 1, "delivered": 1}


def test_extend__keeps_the_lease_from_being_reclaimed(enqueue_task, claim_one, clock) -> None:
    pk = enqueue_task()
    d = claim_one(lease_ms=1000)
    clock.advance(900)
    queue.extend(pk, lease_id=d.lease_id, lease_ms=1000)
    clock.advance(900)
    assert queue.reclaim_expired() == 0
    queue.ack(pk, lease_id=d.lease_id)


def test_extend__wrong_lease__409(enqueue_task, claim_one) -> None:
    pk = enqueue_task()
    d = claim_one()
    with pytest.raises(LeaseMismatch):
        queue.extend(pk, lease_id="nope", lease_ms=60_000)
    assert Task.objects.get(pk=pk).lease_deadline == d.deadline


def test_extend__not_handed_out__404(enqueue_task) -> None:
    with pytest.raises(TaskNotFound):
        queue.extend(enqueue_task(), lease_id="x", lease_ms=1000)
    with pytest.raises(TaskNotFound):
        queue.extend(987_654, lease_id="x", lease_ms=1000)

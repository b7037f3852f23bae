"""queue.cancel and queue.requeue: the moves people make, from every state."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.utils import timezone

from broker import queue
from broker.exceptions import InvalidTransition, TaskNotFound
from broker.models import Task, TaskError
from broker.states import State
from tests.conftest import settle

pytestmark = pytest.mark.django_db

Moved = Callable[[], dict[str, int]]


@pytest.fixture
def task_in(enqueue_task, claim_one) -> Callable[[str], int]:
    """task_in(state) → a task brought to that state through the state machine."""

    made = iter(range(1000))

    def make(state: str) -> int:
        own_queue = f"q{next(made)}"  # so the claim below takes this task, not an older one
        delay_ms = 60_000 if state == "delayed" else 0
        pk = enqueue_task(max_attempts=1, delay_ms=delay_ms, queue=own_queue)
        if state in ("ready", "delayed"):
            return pk
        d = claim_one(queues=[own_queue])
        if state != "handed_out":
            settle(pk, d.lease_id, {"done": "ack", "dead": "nack", "cancelled": "cancel"}[state])
        assert Task.objects.get(pk=pk).state == state
        return pk

    return make


@pytest.mark.parametrize("state", ["ready", "delayed", "handed_out"])
def test_cancel__cancellable_state__cancelled_and_counted(task_in, moved, state: str) -> None:
    pk = task_in(state)
    before = moved()
    queue.cancel(pk)
    task = Task.objects.get(pk=pk)
    assert task.state == State.CANCELLED
    assert (task.lease_id, task.lease_deadline, task.worker) == (None, None, None)
    after = moved()
    assert after.pop("cancelled") == 1
    assert after == before


REFUSED = [
    *[
        pytest.param("cancel", InvalidTransition, s, id=f"cancel-{s}-409")
        for s in ("done", "dead", "cancelled")
    ],
    *[
        pytest.param("requeue", TaskNotFound, s, id=f"requeue-{s}-404")
        for s in ("ready", "delayed", "handed_out", "done", "cancelled")
    ],
]


@pytest.mark.parametrize(("move", "error", "state"), REFUSED)
def test_cancel_finished_or_requeue_not_dead__refused_nothing_moves(
    task_in, moved, move: str, error: type[Exception], state: str
) -> None:
    pk = task_in(state)
    before = moved()
    with pytest.raises(error):
        getattr(queue, move)(pk)
    assert Task.objects.get(pk=pk).state == state
    assert moved() == before


def test_cancel__unknown_task__404(moved: Moved) -> None:
    with pytest.raises(TaskNotFound):
        queue.cancel(987_654)
    assert moved() == {}


def test_cancel__handed_out__worker_ack_and_nack_get_404(enqueue_task, claim_one) -> None:
    pk = enqueue_task()
    d = claim_one()
    queue.cancel(pk)
    with pytest.raises(TaskNotFound):
        queue.ack(pk, lease_id=d.lease_id)
    with pytest.raises(TaskNotFound):
        queue.nack(pk, lease_id=d.lease_id, error="late")
    with pytest.raises(TaskNotFound):
        queue.extend(pk, lease_id=d.lease_id, lease_ms=1000)
    assert Task.objects.get(pk=pk).state == State.CANCELLED


def test_cancel_many__moves_only_cancellable_and_counts_them(task_in, moved) -> None:
    pks = [task_in(s) for s in ("ready", "delayed", "handed_out", "done", "dead")]
    before = moved()
    assert queue.cancel_many([*pks, 987_654]) == 3
    states = [Task.objects.get(pk=pk).state for pk in pks]
    assert states == ["cancelled", "cancelled", "cancelled", "done", "dead"]
    after = moved()
    assert after.pop("cancelled") == 3
    assert after == before


def test_requeue__dead__ready_attempts_reset_history_kept(
    enqueue_task, claim_one, nack_retried, clock, moved: Moved
) -> None:
    pk = enqueue_task(max_attempts=2)
    nack_retried(pk, "first")
    queue.nack(pk, lease_id=claim_one().lease_id, error="second")
    assert Task.objects.get(pk=pk).state == State.DEAD
    requeued_at = clock.now()
    queue.requeue(pk)
    task = Task.objects.get(pk=pk)
    assert (task.state, task.attempts, task.last_error) == (State.READY, 0, None)
    assert task.available_at >= requeued_at
    history = TaskError.objects.filter(task_id=pk).values_list("attempt", "error")
    assert list(history) == [(1, "first"), (2, "second")]
    assert moved() == {
        "enqueued": 1,
        "delivered": 2,
        "nacked": 2,
        "retried": 1,
        "buried": 1,
        "requeued": 1,
    }
    d = claim_one()
    assert (d.task.pk, d.task.attempts) == (pk, 1)


def test_requeue__unknown__404() -> None:
    with pytest.raises(TaskNotFound):
        queue.requeue(987_654)


def test_requeue__twice__second_404(task_in, moved) -> None:
    pk = task_in("dead")
    queue.requeue(pk)
    with pytest.raises(TaskNotFound):
        queue.requeue(pk)
    assert moved()["requeued"] == 1


def test_requeue_many__only_dead_counted(task_in, moved) -> None:
    dead = [task_in("dead"), task_in("dead")]
    done = task_in("done")
    before = moved()
    assert queue.requeue_many([*dead, done]) == 2
    assert [Task.objects.get(pk=pk).state for pk in [*dead, done]] == ["ready", "ready", "done"]
    after = moved()
    assert after.pop("requeued") == 2
    assert after == before
    assert Task.objects.get(pk=done).updated_at <= timezone.now()


def test_requeue__long_history__newest_100_errors_kept(enqueue_task, claim_one, clock) -> None:
    pk = enqueue_task(max_attempts=60)
    for round_ in range(2):
        for attempt in range(60):
            queue.nack(pk, lease_id=claim_one().lease_id, error=f"r{round_} a{attempt}")
            clock.advance(120_000)
            queue.promote_delayed()
        queue.requeue(pk)
    kept = list(TaskError.objects.filter(task_id=pk).order_by("id").values_list("error", flat=True))
    assert len(kept) == 100
    assert kept[0] == "r0 a20" and kept[-1] == "r1 a59"


def test_nack__huge_error__kept_bounded_with_its_start(enqueue_task, claim_one) -> None:
    pk = enqueue_task()
    error = "myapp.Boom\n" + "x" * 300_000 + " raised here"
    queue.nack(pk, lease_id=claim_one().lease_id, error=error)
    kept = Task.objects.get(pk=pk).last_error
    assert len(kept) == 65_536 and kept.startswith("myapp.Boom\nxxx")
    assert kept.endswith(" [truncated]")
    assert TaskError.objects.get(task_id=pk).error == kept


def test_nack__unlimited_attempts__newest_100_errors_kept(enqueue_task, claim_one) -> None:
    pk = enqueue_task(max_attempts=None, backoff=False)  # an SQS message without a redrive policy
    for attempt in range(1, 151):
        queue.nack(pk, lease_id=claim_one().lease_id, error=f"a{attempt}")
        assert queue.promote_delayed() == 1
    kept = list(TaskError.objects.filter(task_id=pk).order_by("id").values_list("error", flat=True))
    assert kept == [f"a{n}" for n in range(51, 151)]
    assert Task.objects.get(pk=pk).state == State.READY

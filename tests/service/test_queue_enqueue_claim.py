"""queue.enqueue and queue.claim: → ready/delayed, → handed_out, with their counters."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone

from broker import queue
from broker.models import Task
from broker.queue import NewTask
from broker.states import Priority, State

pytestmark = pytest.mark.django_db

Moved = Callable[[], dict[str, int]]


def test_enqueue__no_delay__ready_now_and_counted(moved: Moved) -> None:
    before = timezone.now()
    pk, created = queue.enqueue(NewTask(payload='{"a":1}'))
    task = Task.objects.get(pk=pk)
    assert created is True
    assert (task.state, task.attempts, task.max_attempts) == (State.READY, 0, 3)
    assert (task.queue, task.priority, task.type) == ("default", Priority.NORMAL, None)
    assert task.payload == '{"a":1}'
    assert before <= task.available_at == task.created_at <= timezone.now()
    assert task.lease_id is None and task.last_error is None
    assert moved() == {"enqueued": 1}


def test_enqueue__delay__delayed_until_available_at(moved: Moved) -> None:
    pk, _ = queue.enqueue(NewTask(payload="1", delay_ms=60_000))
    task = Task.objects.get(pk=pk)
    assert task.state == State.DELAYED
    assert task.available_at - task.created_at == timedelta(milliseconds=60_000)
    assert moved() == {"enqueued": 1}


def test_enqueue__idempotency_key_kept__same_id_nothing_created(moved: Moved) -> None:
    first, created = queue.enqueue(NewTask(payload="1", idempotency_key="k-1"))
    again, created_again = queue.enqueue(NewTask(payload="2", idempotency_key="k-1"))
    assert (created, created_again) == (True, False)
    assert again == first
    assert Task.objects.count() == 1
    assert Task.objects.get(pk=first).payload == "1"
    assert moved() == {"enqueued": 1}


def test_enqueue__different_idempotency_keys__two_tasks(moved: Moved) -> None:
    a, _ = queue.enqueue(NewTask(payload="1", idempotency_key="a"))
    b, _ = queue.enqueue(NewTask(payload="1", idempotency_key="b"))
    assert a != b
    assert moved() == {"enqueued": 2}


def test_enqueue_many__ids_in_order_ready_and_delayed_counted(moved: Moved) -> None:
    ids = queue.enqueue_many(
        [NewTask(payload="0"), NewTask(payload="1", delay_ms=5000), NewTask(payload="2")]
    )
    rows = {t.pk: t for t in Task.objects.all()}
    assert [rows[pk].payload for pk in ids] == ["0", "1", "2"]
    assert [rows[pk].state for pk in ids] == [State.READY, State.DELAYED, State.READY]
    assert moved() == {"enqueued": 3}


def test_claim__ready__handed_out_under_a_lease(enqueue_task, moved: Moved) -> None:
    pk = enqueue_task()
    before = timezone.now()
    [d] = queue.claim(None, 10_000, worker="w-1")
    after = timezone.now()
    task = Task.objects.get(pk=pk)
    assert d.task.pk == pk and d.lease_id == task.lease_id
    assert (task.state, task.attempts, task.worker) == (State.HANDED_OUT, 1, "w-1")
    assert task.lease_deadline == d.deadline
    assert before + timedelta(seconds=10) <= d.deadline <= after + timedelta(seconds=10)
    assert before <= task.claimed_at <= after
    assert (task.state, d.task.attempts) == (State.HANDED_OUT, 1)
    assert moved() == {"enqueued": 1, "delivered": 1}


def test_claim__nothing_ready__empty_and_nothing_counted(enqueue_task, moved: Moved) -> None:
    enqueue_task(delay_ms=60_000)
    assert queue.claim(None, 30_000) == []
    assert moved() == {"enqueued": 1}


def test_claim__handed_out_task__not_handed_out_twice(enqueue_task, moved: Moved) -> None:
    enqueue_task()
    assert len(queue.claim(None, 30_000)) == 1
    assert queue.claim(None, 30_000) == []
    assert moved() == {"enqueued": 1, "delivered": 1}


def test_claim__priority_then_oldest(enqueue_task) -> None:
    low = enqueue_task(priority=Priority.LOW)
    normal = enqueue_task(priority=Priority.NORMAL)
    high_1 = enqueue_task(priority=Priority.HIGH)
    high_2 = enqueue_task(priority=Priority.HIGH)
    order = [queue.claim(None, 30_000)[0].task.pk for _ in range(4)]
    assert order == [high_1, high_2, normal, low]


def test_claim__queue_filter__only_those_queues(enqueue_task) -> None:
    a = enqueue_task(queue="a")
    enqueue_task(queue="c")
    b = enqueue_task(queue="b")
    got = queue.claim(["a", "b"], 30_000, limit=10)
    assert sorted(d.task.pk for d in got) == sorted([a, b])
    assert queue.claim(["a", "b"], 30_000) == []


def test_claim__limit__that_many_under_one_lease(enqueue_task, moved: Moved) -> None:
    for _ in range(5):
        enqueue_task()
    got = queue.claim(None, 30_000, limit=3)
    assert len(got) == 3
    assert len({d.lease_id for d in got}) == 1
    assert Task.objects.filter(state=State.HANDED_OUT).count() == 3
    assert moved() == {"enqueued": 5, "delivered": 3}

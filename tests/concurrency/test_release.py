"""Releases (SQS's visibility 0), reclaims without backoff and purges racing on PostgreSQL: each
task is held by one claimer at a time, and the counters match the tasks' states."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from broker import queue
from broker.models import Task
from broker.queue import NewTask
from tests.concurrency.conftest import in_thread
from tests.conftest import assert_invariant

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _sqs(n: int, name: str, max_attempts: int | None = None) -> list[int]:
    spec = NewTask(payload="1", queue=name, max_attempts=max_attempts, backoff=False)
    return queue.enqueue_many([spec] * n)


def test_release_and_reclaim__racing_claimers__never_held_twice_counts_agree() -> None:
    ids = _sqs(20, "race")
    stop = threading.Event()
    errors: list[BaseException] = []
    holders: Counter[int] = Counter()
    lock = threading.Lock()

    def receive_and_hand_back() -> None:
        while not stop.is_set():
            # Some leases lapse at once and are left to the sweeper; the others are handed back.
            lapsing = time.monotonic_ns() % 3 == 0
            for d in queue.claim(["race"], 1 if lapsing else 30_000, limit=3):
                if lapsing:
                    continue
                with lock:
                    holders[d.task.pk] += 1
                    assert holders[d.task.pk] == 1, f"task {d.task.pk} held twice"
                time.sleep(0.001)
                with lock:
                    holders[d.task.pk] -= 1
                queue.release_many([(d.task.pk, d.lease_id)])

    def sweep() -> None:
        while not stop.is_set():
            queue.reclaim_expired()

    threads = [in_thread(receive_and_hand_back, errors) for _ in range(4)]
    threads.append(in_thread(sweep, errors))
    time.sleep(3)
    stop.set()
    for thread in threads:
        thread.join(10)
    assert not errors, errors[0]
    time.sleep(0.01)
    queue.reclaim_expired()
    states = Counter(Task.objects.filter(pk__in=ids).values_list("state", flat=True))
    gauges = queue.stats()["queues"]["race"]
    assert {s: n for s, n in gauges.items() if n} == dict(states)
    assert sum(Task.objects.filter(pk__in=ids).values_list("attempts", flat=True)) > 20
    assert_invariant()


def test_purge__while_receiving__every_live_task_cancelled_once() -> None:
    ids = _sqs(3000, "purge")
    errors: list[BaseException] = []
    stop = threading.Event()

    def receive() -> None:
        while not stop.is_set():
            got = queue.claim(["purge"], 30_000, limit=10)
            queue.release_many([(d.task.pk, d.lease_id) for d in got[::2]])

    receivers = [in_thread(receive, errors) for _ in range(2)]
    time.sleep(0.2)
    moved = queue.cancel_queue("purge")
    stop.set()
    for thread in receivers:
        thread.join(10)
    assert not errors, errors[0]
    assert moved == 3000
    assert set(Task.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"cancelled"}
    assert queue.stats()["queues"].get("purge") is None
    assert queue.totals()["cancelled"] == 3000
    assert_invariant()

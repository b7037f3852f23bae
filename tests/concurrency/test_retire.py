"""Retiring the counter rows of emptied queues (counters.retire, from the history recorder) while
tasks keep naming those queues again, on PostgreSQL with threads: no queue's gauges, no total and
no history count moves by a retirement, and every queue stays listed."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest

from broker import queue
from broker.history import recorder
from broker.history.reading import Range, points
from broker.history.sql import ALL_QUEUES
from broker.models import GAUGE_COLUMNS, HistoryPoint, QueueName, Task
from broker.queue import NewTask
from tests.concurrency.conftest import in_thread

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

QUEUES = [f"r{i}" for i in range(12)]
COUNTS = ("enqueued", "acked", "nacked", "reclaimed", "buried")


def test_retire__queues_emptied_and_named_again_while_recording__every_count_kept(
    monkeypatch,
) -> None:
    # Retired as soon as a recording sees them idle: each retirement races the moves naming the
    # queue again.
    monkeypatch.setattr(recorder, "RETIRE_AFTER", timedelta(0))
    stop = threading.Event()
    errors: list[BaseException] = []
    retired: list[int] = []

    def churn(offset: int) -> None:
        turn = offset
        while not stop.is_set():
            name = QUEUES[turn % len(QUEUES)]
            turn += 1
            queue.enqueue_many([NewTask(payload="1", queue=name, max_attempts=1)])
            got = queue.claim([name], 60_000, limit=1)
            queue.ack_many([(d.task.pk, d.lease_id, None) for d in got[:1]])
            if turn % 3 == 0:  # some stay ready or dead a while: queues holding tasks
                queue.enqueue_many([NewTask(payload="1", queue=name, max_attempts=1)])
                for d in queue.claim([name], 60_000, limit=5):
                    queue.nack(d.task.pk, lease_id=d.lease_id, error="x")

    def record() -> None:
        while not stop.is_set():
            done = recorder.record(force=True)
            if done is not None:
                retired.append(done.retired)

    threads = [in_thread(lambda o=o: churn(o), errors) for o in range(3)]
    threads += [in_thread(record, errors) for _ in range(2)]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not errors and sum(retired) < 60:
        time.sleep(0.2)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert sum(retired) >= 60  # queues were retired while tasks named them again

    held = Counter(Task.objects.values_list("queue", "state"))
    gauges = queue.queue_gauges(QUEUES)
    for name in QUEUES:
        assert gauges[name] == {s: held[(name, s)] for s in GAUGE_COLUMNS}, name
    recorder.record(force=True)
    totals = {name: queue.totals()[name] for name in COUNTS}
    assert totals["enqueued"] == Task.objects.count()
    own = HistoryPoint.objects.filter(step=60).exclude(queue=ALL_QUEUES)
    every = HistoryPoint.objects.filter(step=60, queue=ALL_QUEUES)
    for rows in (own, every):
        assert {c: sum(getattr(r, c) for r in rows) for c in COUNTS} == totals
    now = queue.base.current_time()
    shown = points(Range(since=now.replace(year=now.year - 1), until=now, step=60))
    assert {c: sum(p[c] for p in shown) for c in COUNTS} == totals
    assert set(QueueName.objects.values_list("name", flat=True)) == set(QUEUES)

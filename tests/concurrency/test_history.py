"""History under concurrency, on PostgreSQL: recorders racing each other (and the moves) across
hour boundaries record, compact and prune each minute and hour once."""

from __future__ import annotations

import threading
import time

import pytest
from django.test import override_settings

from broker import queue
from broker.history import recorder
from broker.history.reading import Range, points
from broker.history.sql import ALL_QUEUES
from broker.models import HistoryPoint
from broker.queue import NewTask
from tests.concurrency.conftest import in_thread

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

COUNTS = ("enqueued", "acked", "nacked", "reclaimed", "buried")


def _summed(rows) -> dict[str, int]:
    return {name: sum(getattr(r, name) if hasattr(r, name) else r[name] for r in rows)
            for name in COUNTS}  # fmt: skip


@override_settings(BROKER_HISTORY_MINUTES=100_000, BROKER_HISTORY_HOURS=100_000)
def test_history__recorders_race_across_hours__every_count_once(clock) -> None:
    stop = threading.Event()
    errors: list[BaseException] = []
    recordings: list[recorder.Recorded] = []

    def churn(name: str) -> None:
        while not stop.is_set():
            queue.enqueue_many([NewTask(payload="1", queue=name, max_attempts=2) for _ in range(3)])
            got = queue.claim([name], 200, limit=3)
            # The first acked, the second nacked, the third's lease lapses: a reclaim. (The
            # clock jumps: the other thread may reclaim the first two as well.)
            queue.ack_many([(d.task.pk, d.lease_id, None) for d in got[:1]])
            queue.nack_many([(d.task.pk, d.lease_id, "x") for d in got[1:2]])
            queue.reclaim_expired()
            queue.promote_delayed()

    def record() -> None:
        while not stop.is_set():
            done = recorder.record(force=True)
            if done is not None:
                recordings.append(done)

    def move_time() -> None:
        # Twenty minutes a step: the run crosses hours, so recorders compact as they race.
        while not stop.is_set():
            clock.advance(20 * 60_000)
            time.sleep(0.15)

    threads = [in_thread(lambda q=f"q{i}": churn(q), errors) for i in range(2)]
    threads += [in_thread(record, errors) for _ in range(4)]
    threads.append(in_thread(move_time, errors))
    # Until the race has pressed enough (a busy machine gets there later), 30 s at most.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not errors:
        time.sleep(0.2)
        pressed = queue.totals()["enqueued"] > 150 and queue.totals()["nacked"] > 0
        if pressed and sum(r.compacted for r in list(recordings)) >= 4:
            break
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    recorder.record(force=True)

    totals = {name: queue.totals()[name] for name in COUNTS}
    assert totals["enqueued"] > 100 and totals["reclaimed"] > 0 and totals["nacked"] > 0
    assert sum(r.compacted for r in recordings) >= 4  # hours were compacted while racing
    # Nothing pruned (the settings keep all): the stored minutes are every count, once, in the
    # queues' own series and in all queues'.
    minutes = HistoryPoint.objects.filter(step=60)
    assert _summed(minutes.exclude(queue=ALL_QUEUES)) == totals
    assert _summed(minutes.filter(queue=ALL_QUEUES)) == totals
    clock.advance(3600_000)
    recorder.record(force=True)  # compacts the last hour
    hours = HistoryPoint.objects.filter(step=3600)
    assert _summed(hours.exclude(queue=ALL_QUEUES)) == _summed(hours.filter(queue=ALL_QUEUES))
    assert _summed(hours.filter(queue=ALL_QUEUES)) == totals
    now = queue.base.current_time()
    for step in (60, 3600):
        shown = points(Range(since=now - clock.offset * 2, until=now, step=step))
        assert _summed(shown) == totals, step

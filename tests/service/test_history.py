"""History (broker/history): recording from the counter rows, the current bucket, compaction of
minutes into hours, pruning, quantiles. Any database; the clock is broker.queue's, moved."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from broker import queue
from broker.history import recorder
from broker.history.reading import Range, points, quantile_ms
from broker.history.sql import ALL_QUEUES
from broker.models import HistoryClock, HistoryPoint
from broker.queue import NewTask
from tests.conftest import Clock

pytestmark = pytest.mark.django_db

COUNTS = ("enqueued", "acked", "nacked", "reclaimed", "buried")
# 10:00:30 on a day: minute buckets start on the minute, hours on the hour.
START = datetime(2026, 12, 1, 10, 0, 30, tzinfo=UTC)


@pytest.fixture
def at_start(monkeypatch) -> Clock:
    """broker.queue's clock stopped at START, moved by hand."""
    from types import SimpleNamespace

    c = Clock(start=START)
    monkeypatch.setattr(queue.base, "timezone", SimpleNamespace(now=c.now))
    return c


def put(n: int = 1, queue_name: str = "default", **fields: Any) -> list[int]:
    return [queue.enqueue(NewTask(payload="1", queue=queue_name, **fields))[0] for _ in range(n)]


def read(step: int = 60, queue_name: str | None = None, **span: datetime) -> list[dict]:
    now = queue.base.current_time()
    since = span.get("since", now - timedelta(days=100))
    return points(Range(since=since, until=span.get("until", now), step=step, queue=queue_name))


def summed(found: list[dict]) -> dict[str, int]:
    return {name: sum(p[name] for p in found) for name in COUNTS}


def totals() -> dict[str, int]:
    every = queue.totals()
    return {name: every[name] for name in COUNTS}


def stored(step: int) -> dict[str, int]:
    """The counts of the queues' own points (all queues' series holds them once more)."""
    rows = HistoryPoint.objects.filter(step=step).exclude(queue=ALL_QUEUES)
    return {name: sum(getattr(r, name) for r in rows) for name in COUNTS}


def work(n_ack: int, n_fail: int, queue_name: str = "default") -> None:
    """Enqueue n_ack + n_fail single-attempt tasks, claim them all, ack and nack them."""
    put(n_ack + n_fail, queue_name, max_attempts=1)
    got = queue.claim([queue_name], 60_000, limit=n_ack + n_fail)
    for i, d in enumerate(got):
        if i < n_ack:
            queue.ack(d.task.pk, lease_id=d.lease_id)
        else:
            queue.nack(d.task.pk, lease_id=d.lease_id, error="x")


def test_bucket__minutes_and_hours_from_the_epoch() -> None:
    at = datetime(2026, 12, 1, 10, 59, 59, 999_000, tzinfo=UTC)
    assert recorder.bucket(at, 60) == datetime(2026, 12, 1, 10, 59, tzinfo=UTC)
    assert recorder.bucket(at, 3600) == datetime(2026, 12, 1, 10, tzinfo=UTC)


def test_record__moves_in_the_minute__one_point_counts_and_gauges(at_start) -> None:
    work(n_ack=3, n_fail=2)
    put(4)  # ready
    done = recorder.record()
    assert done is not None and done.points == 2  # the queue's, and all queues'
    (point,) = read()
    assert point["at"] == "2026-12-01T10:00:00.000Z"
    assert {k: point[k] for k in COUNTS} == {
        "enqueued": 9, "acked": 3, "nacked": 2, "reclaimed": 0, "buried": 2,
    }  # fmt: skip
    gauges = {k: point[k] for k in ("ready", "handed_out", "delayed", "dead", "blocked")}
    assert gauges == {"ready": 4, "handed_out": 0, "delayed": 0, "dead": 2, "blocked": 0}


def test_record__again_within_a_second__skipped_unless_forced(at_start) -> None:
    put()
    assert recorder.record() is not None
    at_start.advance(500)
    put()
    assert recorder.record() is None
    assert recorder.record(force=True) is not None
    at_start.advance(1000)
    assert recorder.record() is not None


def test_record__each_minute_its_own_point__all_add_up_to_the_totals(at_start) -> None:
    for minute in range(5):
        work(n_ack=minute + 1, n_fail=1)
        recorder.record()
        at_start.advance(60_000)
    recorder.record()  # 10:05: nothing moved; a sample of the gauges (5 dead)
    found = read()
    assert [p["at"][11:16] for p in found] == [f"10:0{m}" for m in range(6)]
    assert [p["acked"] for p in found] == [1, 2, 3, 4, 5, 0]
    assert [p["dead"] for p in found] == [1, 2, 3, 4, 5, 5]
    assert summed(found) == totals() == stored(60)


def test_read__moves_not_yet_recorded__in_the_current_bucket(at_start) -> None:
    work(n_ack=2, n_fail=0)
    recorder.record()
    at_start.advance(120_000)
    work(n_ack=1, n_fail=1)  # after the last recording: no point holds these yet
    found = read()
    assert [p["at"][11:16] for p in found] == ["10:00", "10:02"]
    assert (found[-1]["acked"], found[-1]["buried"], found[-1]["dead"]) == (1, 1, 1)
    assert summed(found) == totals()
    assert stored(60)["acked"] == 2


def test_read__range_without_the_current_bucket__only_what_was_recorded(at_start) -> None:
    work(n_ack=2, n_fail=0)
    recorder.record()
    at_start.advance(120_000)
    work(n_ack=5, n_fail=0)
    until = START + timedelta(seconds=60)
    found = read(until=until)
    assert [(p["at"][11:16], p["acked"]) for p in found] == [("10:00", 2)]


def test_read__since_inside_a_bucket__that_bucket_counts(at_start) -> None:
    work(n_ack=1, n_fail=0)
    recorder.record()
    since = START + timedelta(seconds=20)  # 10:00:50
    assert [p["acked"] for p in read(since=since)] == [1]


def test_record__idle_queue_holding_tasks__all_queues_sampled_each_minute(at_start) -> None:
    put(3, "idle")
    recorder.record()
    for _ in range(3):
        at_start.advance(60_000)
        recorder.record()
    every = HistoryPoint.objects.filter(queue=ALL_QUEUES, step=60).order_by("at")
    assert [(p.ready, p.enqueued) for p in every] == [(3, 3), (3, 0), (3, 0), (3, 0)]
    # The queue's own series: a point when it moves; between, its gauges stand.
    own = HistoryPoint.objects.filter(queue="idle", step=60)
    assert [(p.ready, p.enqueued) for p in own] == [(3, 3)]
    assert [(p["ready"], p["enqueued"]) for p in read(queue_name="idle")] == [(3, 3), (3, 0)]


def test_record__gauges_back_to_zero__sampled_so(at_start) -> None:
    (pk,) = put(1, "z")
    recorder.record()
    at_start.advance(10_000)
    queue.cancel(pk)
    recorder.record()
    (point,) = read(queue_name="z")
    assert (point["enqueued"], point["ready"]) == (1, 0)


def test_read__one_queue__its_own_points_only(at_start) -> None:
    work(n_ack=2, n_fail=0, queue_name="a")
    work(n_ack=0, n_fail=3, queue_name="b")
    recorder.record()
    (a,) = read(queue_name="a")
    (b,) = read(queue_name="b")
    (every,) = read()
    assert (a["acked"], a["buried"], b["acked"], b["buried"]) == (2, 0, 0, 3)
    assert (every["acked"], every["buried"], every["dead"]) == (2, 3, 3)
    assert read(queue_name="never-used") == [{**every, **dict.fromkeys(every, 0),
                                               "at": every["at"], "processing_p50_ms": None,
                                               "processing_p95_ms": None}]  # fmt: skip


def test_compact__a_finished_hour__its_minutes_summed_last_gauges(at_start) -> None:
    for _ in range(3):  # 10:00, 10:20, 10:40
        work(n_ack=2, n_fail=1)
        put(1)
        recorder.record()
        at_start.advance(20 * 60_000)
    assert not HistoryPoint.objects.filter(step=3600).exists()
    before = read(step=3600)  # 10:00 from its minutes: not compacted yet
    at_start.advance(5 * 60_000)  # 11:05:30
    done = recorder.record()
    assert done is not None and done.compacted == 2  # the queue's hour, and all queues'
    (hour,) = HistoryPoint.objects.filter(step=3600, queue="default")
    assert (hour.at, hour.acked, hour.buried, hour.ready, hour.dead) == (
        datetime(2026, 12, 1, 10, tzinfo=UTC), 6, 3, 3, 3,
    )  # fmt: skip
    after = read(step=3600)
    assert after == before
    assert summed(after) == totals() == stored(3600) == stored(60)


def test_read_hours__compacted_and_not__each_minute_counted_once(at_start) -> None:
    work(n_ack=1, n_fail=0)
    recorder.record()
    at_start.advance(3600_000)  # 11:00:30: compacts 10:00
    work(n_ack=2, n_fail=0)
    recorder.record()
    at_start.advance(30 * 60_000)
    work(n_ack=4, n_fail=0)  # unrecorded
    found = read(step=3600)
    assert [(p["at"][11:16], p["acked"]) for p in found] == [("10:00", 1), ("11:00", 6)]
    assert summed(found) == totals()


def test_read_hours__until_inside_an_hour__the_whole_hour_as_once_compacted(at_start) -> None:
    work(n_ack=1, n_fail=0)
    recorder.record()  # 10:00
    at_start.advance(20 * 60_000)
    work(n_ack=2, n_fail=0)
    recorder.record()  # 10:20
    at_start.advance(60 * 60_000)
    recorder.record()  # 11:20: 10:00 compacted
    until = START + timedelta(minutes=5)  # 10:05, inside the 10:00 hour
    compacted = read(step=3600, since=START, until=until)
    assert [(p["at"][11:16], p["acked"]) for p in compacted] == [("10:00", 3)]
    # The same read before the hour was compacted: its minutes, those after `until` too.
    HistoryPoint.objects.filter(step=3600).delete()
    HistoryClock.objects.update(compacted_until=None)
    not_yet = read(step=3600, since=START, until=until)
    assert not_yet == compacted


def test_record__after_downtime__the_gap_counts_in_the_minute_it_resumes(at_start) -> None:
    work(n_ack=1, n_fail=0)
    recorder.record()
    at_start.advance(3 * 3600_000)  # the sweepers were down three hours
    work(n_ack=2, n_fail=0)
    done = recorder.record()
    # 10:00 (11:00 and 12:00 had no minutes), for the queue and for all queues
    assert done is not None and done.compacted == 2
    assert [(p["at"][11:16], p["acked"]) for p in read()] == [("10:00", 1), ("13:00", 2)]
    assert [(p["at"][11:16], p["acked"]) for p in read(step=3600)] == [("10:00", 1), ("13:00", 2)]


@override_settings(BROKER_HISTORY_MINUTES=30, BROKER_HISTORY_HOURS=3)
def test_prune__past_the_settings__minutes_only_once_compacted(at_start) -> None:
    for _ in range(6):  # 10:00:30 ... 14:10:30, every 50 minutes
        work(n_ack=1, n_fail=0)
        recorder.record()
        at_start.advance(50 * 60_000)
    work(n_ack=1, n_fail=0)
    recorder.record()  # 15:00:30
    kept = HistoryPoint.objects.filter(queue="default")
    minutes = sorted(p.at.strftime("%H:%M") for p in kept.filter(step=60))
    hours = sorted(p.at.strftime("%H:%M") for p in kept.filter(step=3600))
    # Minutes: the last 30 only (14:10 is older).
    assert minutes == ["15:00"]
    # Hours: from 12:00:30 on (15:00 - 3 h): 12:00 began before it and is pruned.
    assert hours == ["13:00", "14:00"]


@override_settings(BROKER_HISTORY_MINUTES=0)
def test_prune__no_minutes_kept__the_current_hour_stays_until_compacted(at_start) -> None:
    work(n_ack=1, n_fail=0)
    recorder.record()
    at_start.advance(5 * 60_000)
    work(n_ack=1, n_fail=0)
    recorder.record()
    assert HistoryPoint.objects.filter(step=60, queue="default").count() == 2
    assert summed(read(step=3600)) == totals()


def test_processing_quantiles__from_the_buckets_acks_and_nacks(at_start) -> None:
    put(4, max_attempts=1)
    held = queue.claim(None, 60_000, limit=4)
    at_start.advance(80)  # 80 ms: in (50, 100]
    for d in held[:3]:
        queue.ack(d.task.pk, lease_id=d.lease_id)
    at_start.advance(2_000)  # 2.08 s: in (1, 2.5]
    queue.nack(held[3].task.pk, lease_id=held[3].lease_id, error="slow")
    recorder.record()
    (point,) = read()
    assert 50 < point["processing_p50_ms"] <= 100
    assert 1000 < point["processing_p95_ms"] <= 2500


def test_processing_quantiles__none_without_a_settle(at_start) -> None:
    put(1)
    recorder.record()
    (point,) = read()
    assert point["processing_p50_ms"] is None and point["processing_p95_ms"] is None


@pytest.mark.parametrize(
    ("counts", "q", "expected"),
    [
        ([0] * 16, 0.5, None),
        ([2] + [0] * 15, 0.5, 2.5),  # the first bucket is (0, 5 ms]
        ([0, 0, 0, 4] + [0] * 12, 0.95, 48.75),  # (25, 50]: 25 + 25 * 3.8 / 4
        ([0] * 15 + [3], 0.5, 300_000.0),  # past the last bound: that bound
        ([1, 1] + [0] * 14, 1.0, 10.0),
    ],
)
def test_quantile_ms__histogram_quantile(counts: list[int], q: float, expected) -> None:
    assert quantile_ms(counts, q) == expected


def test_record__reads_counter_rows_never_the_tasks(at_start) -> None:
    work(n_ack=5, n_fail=5)
    with CaptureQueriesContext(connection) as ctx:
        recorder.record()
    assert not any("broker_task" in q["sql"] for q in ctx.captured_queries)
    with CaptureQueriesContext(connection) as ctx:
        read()
    assert len(ctx.captured_queries) == 1
    assert "broker_task" not in ctx.captured_queries[0]["sql"]


def test_sweep__records_history__runsweeper_once_always(at_start) -> None:
    from io import StringIO

    from django.core.management import call_command

    from broker.sweeper import sweep_once

    work(n_ack=2, n_fail=1)
    sweep_once()
    assert stored(60) == totals()
    work(n_ack=1, n_fail=0)
    sweep_once()  # within the second: the next sweep's recording counts it
    assert stored(60)["acked"] == 2
    call_command("runsweeper", "--once", stdout=StringIO())  # a one-off sweep records now
    assert stored(60) == totals()

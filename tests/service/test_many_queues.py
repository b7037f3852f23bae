"""Queues named by clients, many of them: what the counter reads and the sweeper cost grows with
the queues holding tasks, never with the queues ever named. Rows and points counted, not time
(these machines are noisy). Any database; the history clock is broker.queue's, moved by hand."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from broker import queue
from broker.history import recorder
from broker.history.reading import Range, points
from broker.models import COUNTER_SHARDS, HistoryMark, QueueCounter
from broker.queue import NewTask, counters
from broker.sweeper import sweep_once
from tests.conftest import Clock
from tests.reads import finish_all, name_queues, rows_fetched

pytestmark = pytest.mark.django_db

MANY = 2000
START = datetime(2026, 12, 1, 10, 0, 30, tzinfo=UTC)


@pytest.fixture
def at_start(monkeypatch) -> Clock:
    from types import SimpleNamespace

    c = Clock(start=START)
    monkeypatch.setattr(queue.base, "timezone", SimpleNamespace(now=c.now))
    return c


def sweep_till_retired(clock: Clock, n: int) -> None:
    """Sweeps that record the queues' last moves, then, once idle RETIRE_AFTER, retire them
    (a batch a recording)."""
    sweep_once(record_now=True)
    clock.advance(recorder.RETIRE_AFTER.total_seconds() * 1000 + 1000)
    for _ in range(n // counters.RETIRE_BATCH + 1):
        sweep_once(record_now=True)
        clock.advance(1000)


def test_sweep__many_queues_all_done__their_counter_rows_and_marks_go(at_start) -> None:
    name_queues(MANY)
    finish_all()
    before = queue.stats()
    sweep_till_retired(at_start, MANY)
    assert QueueCounter.objects.count() <= COUNTER_SHARDS
    assert HistoryMark.objects.count() <= 2  # all queues', and that of the queues emptied
    after = queue.stats()
    assert (after["totals"], after["gauges"], after["queues"]) == (
        before["totals"], before["gauges"], {},
    )  # fmt: skip
    assert after["histogram"] == before["histogram"]


def test_sweep__idle__rows_fetched_do_not_grow_with_queues_that_held_tasks(at_start) -> None:
    def idle_sweep(prefix: str, n: int) -> int:
        name_queues(n, prefix)
        finish_all()
        sweep_till_retired(at_start, n)
        with rows_fetched() as seen:
            sweep_once(record_now=True)
        return seen.rows

    few = idle_sweep("few", 20)
    assert idle_sweep("many", MANY) == few


def test_sweep__queue_emptied_lately__its_rows_kept_till_idle_a_while(at_start) -> None:
    name_queues(3)
    finish_all()
    sweep_once(record_now=True)
    at_start.advance(recorder.RETIRE_AFTER.total_seconds() * 1000 - 1000)
    sweep_once(record_now=True)
    assert QueueCounter.objects.filter(queue="q00001").exists()
    at_start.advance(2000)
    sweep_once(record_now=True)
    assert not QueueCounter.objects.filter(queue="q00001").exists()
    assert HistoryMark.objects.filter(queue="q00001").count() == 0


def test_record__many_queues_holding_idle__one_point_a_minute_rows_bounded(at_start) -> None:
    name_queues(MANY)
    first = recorder.record(force=True)
    assert first is not None and first.points == MANY + 1  # each queue's, and all queues'
    at_start.advance(60_000)
    with rows_fetched() as seen:
        done = recorder.record()
    assert done is not None and done.points == 1  # all queues' sample of the minute
    assert seen.rows < 10
    every = points(Range(since=START, until=at_start.now(), step=60))
    assert [(p["enqueued"], p["ready"]) for p in every] == [(MANY, MANY), (0, MANY)]
    one = points(Range(since=START, until=at_start.now(), step=60, queue="q00007"))
    assert [(p["enqueued"], p["ready"]) for p in one] == [(1, 1), (0, 1)]  # the current: now


def test_read__all_queues__rows_fetched_do_not_grow_with_queues(at_start) -> None:
    name_queues(MANY)
    recorder.record(force=True)
    at_start.advance(60_000)
    name_queues(MANY, "more")
    with rows_fetched() as seen:
        found = points(Range(since=START, until=at_start.now(), step=60))
    assert [p["enqueued"] for p in found] == [MANY, MANY]
    assert seen.rows < 10


def test_stats__many_queues_holding__the_busiest_shown_rows_bounded() -> None:
    name_queues(MANY)
    queue.enqueue_many([NewTask(payload="1", queue="busy") for _ in range(3)])
    with rows_fetched() as seen:
        now = queue.stats()
    assert seen.rows <= counters.SHOWN_QUEUES + 1
    assert len(now["queues"]) == counters.SHOWN_QUEUES
    assert now["queues"]["busy"]["ready"] == 3
    assert list(now["queues"]) == sorted(now["queues"])
    assert now["gauges"]["ready"] == now["totals"]["enqueued"] == MANY + 3


def test_stats__a_queue_asked_for__shown_beside_the_busiest() -> None:
    name_queues(MANY)
    queue.enqueue_many([NewTask(payload="1", queue="busy") for _ in range(3)])
    now = counters.stats(shown=2, also=("q01999", "never-used"))
    assert now["queues"] == {
        "busy": {"ready": 3, "handed_out": 0, "delayed": 0, "dead": 0, "blocked": 0},
        "q00000": {"ready": 1, "handed_out": 0, "delayed": 0, "dead": 0, "blocked": 0},
        "q01999": {"ready": 1, "handed_out": 0, "delayed": 0, "dead": 0, "blocked": 0},
    }


@pytest.mark.postgres
def test_claim__a_plain_settings_row_per_queue__restricted_ones_found_by_index() -> None:
    from django.db import connection

    from broker import queues
    from broker.queue import sql
    from tests.conftest import explain

    queues.ensure_rows([f"q{i:05d}" for i in range(MANY)])  # as admin's queue list makes them
    queues.update("held", {"paused": True})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE broker_queue")
    for statement, params in (
        (sql.CLAIM_ANY, {}),
        (sql.CLAIM_QUEUES, {"queues": ["q00007"]}),
        # The restricted path's first look, naming no queue (SQS-made queues too) or some.
        (sql.RESTRICTED_IN_EVERY, {"every": True, "scope": []}),
        (sql.RESTRICTED_IN, {"every": False, "scope": ["q00007", "held"]}),
    ):
        plan = explain(statement, "(ANALYZE, COSTS OFF)", **params)
        assert "queue_restricted_idx" in plan, plan
        assert "Seq Scan on broker_queue" not in plan, plan

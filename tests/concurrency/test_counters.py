"""Counters under concurrency, on PostgreSQL: /stats is one instant, and transactional enqueues
neither deadlock nor make other moves wait on the caller's transaction."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

import broker
from broker import queue
from broker.queue import NewTask
from tests.concurrency.conftest import in_thread

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _balanced(stats: dict) -> bool:
    totals = stats["totals"]
    live = totals["enqueued"] - totals["acked"] - totals["cancelled"]
    return live == sum(stats["gauges"].values())


def test_stats__under_load__every_answer_adds_up() -> None:
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn(name: str) -> None:
        n = 0
        while not stop.is_set():
            queue.enqueue(NewTask(payload="1", queue=name, max_attempts=1))
            got = queue.claim([name], 30_000, limit=2)
            for i, d in enumerate(got):
                if i % 2:
                    queue.nack(d.task.pk, lease_id=d.lease_id, error="x")
                else:
                    queue.ack(d.task.pk, lease_id=d.lease_id)
            n += 1
            if n % 5 == 0:
                queue.cancel(queue.enqueue(NewTask(payload="2", queue=name))[0])

    workers = [in_thread(lambda q=f"q{i}": churn(q), errors) for i in range(3)]
    reads = []
    client = APIClient()
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            answer = client.get("/stats").json()
            reads.append(
                {
                    "totals": answer.pop("totals"),
                    "gauges": {k: answer[k] for k in ("ready", "handed_out", "delayed", "dead")},
                }
            )
    finally:
        stop.set()
        for worker in workers:
            worker.join(30)
    assert not errors, errors
    moved = reads[-1]["totals"]["enqueued"]
    assert len(reads) > 20 and moved > 50, (len(reads), moved)
    unbalanced = [r for r in reads if not _balanced(r)]
    assert not unbalanced, f"{len(unbalanced)} of {len(reads)} reads disagree: {unbalanced[0]}"


def test_stats__however_many_tasks__one_statement_that_never_reads_the_tasks() -> None:
    # The table's size cannot matter to /stats or /metrics: neither reads it.
    for path in ("/stats", "/metrics"):
        with CaptureQueriesContext(connection) as ctx:
            assert APIClient().get(path).status_code == 200
        assert len(ctx.captured_queries) == 1, (path, ctx.captured_queries)
        assert "broker_task" not in ctx.captured_queries[0]["sql"], path


def test_transactional_enqueue__slow_caller__other_moves_never_wait() -> None:
    started, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def slow_app_transaction() -> None:
        with transaction.atomic():
            broker.enqueue({"order": 1}, queue="app")
            started.set()
            release.wait(10)

    holder = in_thread(slow_app_transaction, errors)
    try:
        assert started.wait(10)
        slowest = 0.0
        for i in range(60):  # each move picks a counter shard: all 16 get used
            begin = time.monotonic()
            queue.enqueue(NewTask(payload=str(i), queue=f"other{i % 16}"))
            (d,) = queue.claim([f"other{i % 16}"], 30_000)
            queue.ack(d.task.pk, lease_id=d.lease_id)
            slowest = max(slowest, time.monotonic() - begin)
        assert slowest < 1.0, f"a move waited {slowest:.2f} s on the caller's open transaction"
    finally:
        release.set()
        holder.join(30)
    assert not errors, errors
    assert queue.totals()["enqueued"] == 61


def test_transactional_enqueue__many_callers_crossing__no_deadlock() -> None:
    errors: list[BaseException] = []
    for _ in range(5):
        barrier = threading.Barrier(8)

        def app_transaction(barrier: threading.Barrier = barrier) -> None:
            with transaction.atomic():
                broker.enqueue("first", queue="a")
                barrier.wait(10)  # every caller now holds what its first enqueue took
                for name in ("b", "c", "d"):
                    broker.enqueue("more", queue=name)

        threads = [in_thread(app_transaction, errors) for _ in range(8)]
        for thread in threads:
            thread.join(60)
    assert not errors, errors
    assert queue.totals()["enqueued"] == 5 * 8 * 4
    stats = queue.stats()
    assert stats["gauges"]["ready"] == 160 and _balanced(stats)

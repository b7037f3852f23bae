"""/stats, /metrics, /stats/history and GET /queues beside thousands of queues: answers and the
rows read to make them stay the same size however many queues clients named (sizes and rows, not
time: these machines are noisy)."""

from __future__ import annotations

import pytest

from broker.history import recorder
from broker.queue import counters
from tests.reads import finish_all, name_queues, rows_fetched

pytestmark = pytest.mark.django_db

MANY = 2000


def test_stats__thousands_of_queues_holding_tasks__answer_does_not_grow(api_client) -> None:
    name_queues(150)
    some = api_client.get("/stats")
    name_queues(MANY, "r")  # names as long as the first
    with rows_fetched() as seen:
        many = api_client.get("/stats")
    assert many.status_code == 200
    assert len(many.content) <= len(some.content) + 50  # a few digits more, no queue more
    body = many.json()
    assert len(body["queues"]) == counters.SHOWN_QUEUES
    assert body["ready"] == MANY + 150
    assert seen.rows <= counters.SHOWN_QUEUES + 1


def test_stats__thousands_of_queues_long_done__nothing_per_queue(api_client) -> None:
    name_queues(MANY)
    finish_all()
    body = api_client.get("/stats").json()
    assert body["queues"] == {}
    assert (body["totals"]["enqueued"], body["totals"]["acked"]) == (MANY, MANY)


def test_metrics__thousands_of_queues__rows_read_bounded(api_client) -> None:
    from broker.metrics import MAX_QUEUE_LABELS

    name_queues(MANY)
    with rows_fetched() as seen:
        r = api_client.get("/metrics")
    assert r.status_code == 200
    assert seen.rows <= MAX_QUEUE_LABELS + 2
    pending = [line for line in r.content.decode().splitlines()
               if line.startswith("queue_pending_jobs{")]  # fmt: skip
    assert len(pending) == MAX_QUEUE_LABELS + 1  # the busiest, and "other"
    assert sum(float(line.rsplit(" ", 1)[1]) for line in pending) == MANY


def test_history__thousands_of_queues__rows_read_bounded(api_client) -> None:
    name_queues(MANY)
    recorder.record(force=True)
    name_queues(MANY, "more")
    for query in ("", "?queue=q00007", "?step=3600"):
        with rows_fetched() as seen:
            r = api_client.get(f"/stats/history{query}")
        assert r.status_code == 200, query
        assert seen.rows < 10, query
        enqueued = sum(p["enqueued"] for p in r.json()["points"])
        assert enqueued == (1 if "queue" in query else 2 * MANY), query


def test_queue__one_among_thousands__rows_read_bounded(api_client) -> None:
    name_queues(MANY)
    with rows_fetched() as seen:
        r = api_client.get("/queues/q00007")
    assert r.status_code == 200
    assert r.json()["ready"] == 1
    assert seen.rows < 10


def test_queues__thousands__a_page_at_a_time_rows_read_bounded(api_client) -> None:
    name_queues(MANY)
    api_client.get("/queues")  # names registered once
    with rows_fetched() as seen:
        r = api_client.get("/queues")
    body = r.json()
    assert r.status_code == 200
    assert [q["name"] for q in body["results"]] == [f"q{i:05d}" for i in range(1999, 1949, -1)]
    assert seen.rows < 120

"""Many producers and claimers at once, on PostgreSQL: each task acked exactly once."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.test import Client

from broker import queue
from tests.conftest import assert_invariant

# A load test (56 threads on the pool): make test-slow, alone, where its pool waits hold.
pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TASKS, PRODUCERS, CLAIMERS = 2000, 50, 6


class ServedClient(Client):
    """Gives the pooled connection back after each request, as a WSGI server does.

    Django's test client keeps a thread's connection open from one request to the next, so
    16 pooled connections went to the first 16 threads for their whole loops and the others
    waited out whole loops (11 s at worst on a slow host, past the pool's 8 s timeout: a 503).
    """

    def request(self, **request):
        try:
            return super().request(**request)
        finally:
            connection.close()


def test_contention__2000_tasks_50_producers_6_claimers__each_acked_once() -> None:
    acked: list[str] = []
    acked_lock = threading.Lock()
    producing = threading.Event()
    producing.set()
    errors: list[str] = []

    def produce(start: int) -> None:
        client = ServedClient()
        try:
            for i in range(start, TASKS, PRODUCERS):
                r = client.post("/jobs", {"payload": {"i": i}}, content_type="application/json")
                if r.status_code != 201:
                    errors.append(f"enqueue {i}: {r.status_code} {r.content!r}")
        finally:
            connection.close()

    def claim_and_ack() -> None:
        client = ServedClient()
        try:
            while True:
                r = client.get("/jobs/next", {"wait_ms": 200, "lease_ms": 60000})
                if r.status_code == 204:
                    if not producing.is_set() and queue.gauges()[0]["ready"] == 0:
                        return
                    continue
                body = r.json()
                task_id, lease = body["task"]["id"], body["lease_id"]
                # A JSON body: the test client's default is a (multipart) form, which is a 415.
                a = client.post(
                    f"/jobs/{task_id}/ack?lease_id={lease}", content_type="application/json"
                )
                if a.status_code != 204:
                    errors.append(f"ack {task_id}: {a.status_code}")
                with acked_lock:
                    acked.append(body["task"]["payload"]["i"])
        finally:
            connection.close()

    with ThreadPoolExecutor(CLAIMERS) as claimers:
        claim_futures = [claimers.submit(claim_and_ack) for _ in range(CLAIMERS)]
        with ThreadPoolExecutor(PRODUCERS) as producers:
            list(producers.map(produce, range(PRODUCERS)))
        producing.clear()
        for f in claim_futures:
            f.result(timeout=120)

    assert errors == []
    counts = Counter(acked)
    assert sorted(counts) == list(range(TASKS))
    assert max(counts.values()) == 1
    totals = queue.totals()
    assert totals["enqueued"] == totals["acked"] == totals["delivered"] == TASKS
    assert queue.gauges()[0] == {"ready": 0, "handed_out": 0, "delayed": 0, "dead": 0, "blocked": 0}
    assert_invariant()

"""Events under real concurrency on PostgreSQL: an event posted while waits for it are being
enqueued is never lost (each wait either finds it kept or is released by it), and a wait's
timeout moves its task exactly once however many sweepers run."""

from __future__ import annotations

import json
import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from broker.models import EventWait, Task
from broker.queue import events
from broker.queue.base import current_time
from tests.concurrency.conftest import in_thread

pytestmark = [pytest.mark.postgres]


def _post(url: str, body: Any) -> tuple[int, Any]:
    r = Client().post(url, json.dumps(body), content_type="application/json")
    return r.status_code, r.json()


def _race(sends: list[Any]) -> list[Any]:
    """Each send() in a thread of its own, released at once; their answers in order."""
    start = threading.Barrier(len(sends))
    answers: list[Any] = [None] * len(sends)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        start.wait(timeout=30)
        answers[i] = sends[i]()

    threads = [in_thread(lambda i=i: run(i), errors) for i in range(len(sends))]
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return answers


def _gauges_agree() -> None:
    stats = Client().get("/stats").json()
    states = Counter(Task.objects.values_list("state", flat=True))
    for state in ("ready", "delayed", "handed_out", "blocked", "dead"):
        assert stats[state] == states.get(state, 0), (state, stats, states)


@pytest.mark.django_db(transaction=True)
def test_event_posted_while_waits_are_enqueued__none_lost() -> None:
    rounds, waiters = 8, 6
    for n in range(rounds):
        key = f"order-{n}"
        wait = {"event": "paid", "key": key}
        sends = [
            (lambda w=wait: _post("/jobs", {"payload": 1, "queue": "o", "wait_for": w}))
            for _ in range(waiters)
        ]
        sends.insert(waiters // 2, lambda k=key: _post("/events", {"name": "paid", "key": k}))
        answers = _race(sends)
        assert all(code in (201, 202) for code, _ in answers), answers
    # Every wait found its event kept or was released by it: none is left blocked.
    assert Task.objects.filter(state="blocked").count() == 0
    assert not EventWait.objects.exists()
    assert Task.objects.filter(state="ready", event__isnull=False).count() == rounds * waiters
    totals = Client().get("/stats").json()["totals"]
    assert (totals["enqueued"], totals["events"]) == (rounds * waiters, rounds)
    _gauges_agree()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("on_timeout", ["cancel", "run"])
def test_timeouts__several_sweepers__each_wait_ends_once(on_timeout: str) -> None:
    n = 60
    wait = {"event": "never", "key": "k", "timeout_ms": 1, "on_timeout": on_timeout}
    code, _ = _post("/jobs/batch", {"jobs": [{"payload": i, "wait_for": wait} for i in range(n)]})
    assert code == 201
    later = current_time() + timedelta(seconds=1)
    ended = sum(_race([lambda: events.expire_waits(later, limit=7) for _ in range(4)]))
    while more := events.expire_waits(later, limit=7):
        ended += more
    assert ended == n  # each wait ended by one sweeper only
    states = Counter(Task.objects.values_list("state", flat=True))
    totals = Client().get("/stats").json()["totals"]
    if on_timeout == "cancel":
        assert states == {"cancelled": n}
        assert (totals["cancelled"], totals["released"]) == (n, 0)
    else:
        assert states == {"ready": n}
        assert (totals["cancelled"], totals["released"]) == (0, n)
        assert not Task.objects.filter(event__isnull=False).exists()
    assert not EventWait.objects.exists()
    _gauges_agree()


@pytest.mark.django_db(transaction=True)
def test_one_event__a_thousand_waiters__a_few_statements() -> None:
    def statements(waiters: int, key: str) -> tuple[int, int]:
        wait = {"event": "e", "key": key}
        jobs = [{"payload": i, "wait_for": wait} for i in range(waiters)]
        assert _post("/jobs/batch", {"jobs": jobs})[0] == 201
        with CaptureQueriesContext(connection) as seen:
            posted = events.post_event("e", key, "null", None)
        assert posted.released == waiters
        return len(seen.captured_queries), posted.released

    few, _ = statements(2, "small")
    many, released = statements(1000, "big")
    assert many == few, (few, many)  # not one per task
    assert released == 1000
    assert Task.objects.filter(state="ready").count() == 1002
    _gauges_agree()

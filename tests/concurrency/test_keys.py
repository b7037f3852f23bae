"""Per-key limits and ordered keys under real concurrency on PostgreSQL: many claimers at once,
nacks, leases that lapse and a sweeper reclaiming them. No key ever has more than its cap in
flight; an ordered key never has two tasks handed out, and its tasks start in enqueue order."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter, defaultdict

import pytest
from django.db import connection

from broker import queue, queues
from broker.queue import NewTask
from tests.concurrency.conftest import in_thread
from tests.conftest import assert_invariant

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CLAIMERS = 8
KEYS = [f"k{i}" for i in range(5)]


class Flight:
    """What the claimers hold right now, per key, counted as they claim and before they settle
    (so it never shows fewer than the database has handed out)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.starts: dict[str, list[int]] = defaultdict(list)
        self.started: set[int] = set()

    def took(self, pk: int, key: str) -> None:
        with self.lock:
            self.now[key] += 1
            self.most[key] = max(self.most[key], self.now[key])
            if pk not in self.started:
                self.started.add(pk)
                self.starts[key].append(pk)

    def left(self, key: str) -> None:
        with self.lock:
            self.now[key] -= 1


def _sample_db(name: str, stop: threading.Event, worst: list[int]) -> None:
    """Watch the database itself: the most tasks of one key handed out at any sample."""
    while not stop.is_set():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM broker_task"
                " WHERE queue = %s AND state = 'handed_out' GROUP BY key) AS c",
                [name],
            )
            worst.append(cursor.fetchone()[0])
        time.sleep(0.002)


def _run(name: str, per_key: int, lapse: bool) -> tuple[Flight, int]:
    queue.enqueue_many(
        [NewTask(payload=json.dumps(i), queue=name, key=k, max_attempts=100)
         for i in range(per_key) for k in KEYS]
    )  # fmt: skip
    flight, stop = Flight(), threading.Event()
    errors: list[BaseException] = []
    worst: list[int] = []

    def claimer() -> None:
        rng = random.Random()
        while not stop.is_set():
            got = queue.claim([name], 50 if lapse and rng.random() < 0.1 else 30_000, limit=2)
            if not got:
                time.sleep(0.001)
                continue
            for d in got:
                flight.took(d.task.pk, d.task.key or "")
            time.sleep(rng.random() * 0.003)
            for d in got:
                flight.left(d.task.key or "")
                if d.deadline.timestamp() - time.time() < 1:
                    continue  # a lease left to lapse: the sweeper reclaims it
                if rng.random() < 0.2:
                    queue.nack(d.task.pk, lease_id=d.lease_id, error="flaky")
                else:
                    queue.ack(d.task.pk, lease_id=d.lease_id)

    def sweeper() -> None:
        while not stop.is_set():
            queue.reclaim_expired()
            queue.promote_delayed()
            time.sleep(0.01)

    threads = [in_thread(claimer, errors) for _ in range(CLAIMERS)]
    threads += [
        in_thread(sweeper, errors),
        in_thread(lambda: _sample_db(name, stop, worst), errors),
    ]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if queue.totals()["acked"] >= per_key * len(KEYS):
            break
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not errors, errors[0]
    return flight, max(worst, default=0)


@pytest.fixture(autouse=True)
def _quick_retries(settings) -> None:
    settings.BROKER_RETRY_BASE_MS, settings.BROKER_RETRY_MAX_MS = 1, 5


def test_key_max__many_claimers_nacks_and_lapses__never_over_the_cap() -> None:
    queues.update("capped", {"key_max_in_flight": 2})
    flight, worst_in_db = _run("capped", 40, lapse=True)
    assert queue.totals()["acked"] == 40 * len(KEYS)
    assert max(flight.most.values()) <= 2, flight.most
    assert worst_in_db <= 2
    assert max(flight.most.values()) == 2  # the cap was reached: the test pressed on it
    assert_invariant()


def test_ordered__many_claimers_nacks_and_lapses__one_at_a_time_in_order() -> None:
    queues.update("ledger", {"ordered": True})
    flight, worst_in_db = _run("ledger", 30, lapse=True)
    assert queue.totals()["acked"] == 30 * len(KEYS)
    assert set(flight.most.values()) == {1}, flight.most
    assert worst_in_db <= 1
    for key, starts in flight.starts.items():
        assert starts == sorted(starts), key  # each task first ran after every earlier one
    assert_invariant()


def test_fair__concurrent_claimers__one_round_over_every_key_before_a_second() -> None:
    queues.update("shared", {"fair": True})
    small = [f"tenant-{i:02}" for i in range(20)]
    queue.enqueue_many([NewTask(payload="1", queue="shared", key="big") for _ in range(200)])
    queue.enqueue_many([NewTask(payload="1", queue="shared", key=key) for key in small])
    taken: list[str] = []
    errors: list[BaseException] = []
    go = threading.Barrier(7)

    def claimer() -> None:
        go.wait()
        for _ in range(3):  # 7 x 3 = 21 claims: one round, each key once
            for d in queue.claim(["shared"], 60_000, limit=1):
                taken.append(d.task.key or "")

    for t in [in_thread(claimer, errors) for _ in range(7)]:
        t.join(30)
    assert not errors, errors
    assert Counter(taken) == Counter(["big", *small])

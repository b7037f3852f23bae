"""Global limits under real concurrency on PostgreSQL: threads and processes claim at once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from broker import queue, queues
from broker.longpoll import claim_wait
from broker.models import Task
from broker.queue import NewTask
from tests.conftest import settle
from tests.procs import Proc, child_env

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

THREADS, PROCESSES = 8, 3


def fill(name: str, n: int) -> None:
    queue.enqueue_many([NewTask(payload=json.dumps(i), queue=name) for i in range(n)])


def in_flight(name: str) -> int:
    return Task.objects.filter(queue=name, state="handed_out").count()


def children(db_url: str, tmp: Path, name: str, seconds: float, mode: str) -> list[Proc]:
    import sys

    return [
        Proc(
            [sys.executable, "-m", "tests.concurrency.claimer_child", name, str(seconds), mode,
             str(tmp / f"child{i}.json")],
            child_env(db_url), tmp / f"child{i}.log",
        )
        for i in range(PROCESSES)
    ]  # fmt: skip


def child_results(procs: list[Proc], tmp: Path) -> list[tuple[float, int]]:
    got: list[tuple[float, int]] = []
    for i, proc in enumerate(procs):
        assert proc.wait(60) == 0, proc.output()
        proc.stop()
        got += [tuple(x) for x in json.loads((tmp / f"child{i}.json").read_text())]
    return got


def threads(target: Callable[[], None], n: int = THREADS) -> list[threading.Thread]:
    def run() -> None:
        try:
            target()
        finally:
            connection.close()

    started = [threading.Thread(target=run) for _ in range(n)]
    for t in started:
        t.start()
    return started


def test_max_in_flight__many_claimers_holding__exactly_the_cap_handed_out(
    db_url: str, tmp_path: Path
) -> None:
    queues.update("cap", {"max_in_flight": 5})
    fill("cap", 200)
    procs = children(db_url, tmp_path, "cap", 2.0, "hold")
    mine: list[int] = []
    lock = threading.Lock()

    def hold() -> None:
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            got = queue.claim(["cap"], 60_000, limit=3)
            with lock:
                mine.extend(d.task.pk for d in got)

    for t in threads(hold):
        t.join()
    theirs = child_results(procs, tmp_path)
    assert len(mine) + len(theirs) == 5, (len(mine), len(theirs))
    assert in_flight("cap") == 5


def test_max_in_flight__claim_and_ack_churn__never_over_the_cap(
    db_url: str, tmp_path: Path
) -> None:
    queues.update("churn", {"max_in_flight": 4})
    fill("churn", 3000)
    samples: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            samples.append(in_flight("churn"))

    watcher = threads(watch, 1)
    procs = children(db_url, tmp_path, "churn", 3.0, "churn")
    acked: list[int] = []

    def churn() -> None:
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            got = queue.claim(["churn"], 60_000, limit=3)
            time.sleep(0.001)
            queue.ack_many([(d.task.pk, d.lease_id, None) for d in got])
            acked.extend(d.task.pk for d in got)

    for t in threads(churn):
        t.join()
    theirs = child_results(procs, tmp_path)
    stop.set()
    watcher[0].join()
    assert len(samples) > 50 and max(samples) <= 4, (len(samples), max(samples))
    assert len(acked) + len(theirs) > 100  # real churn, not a stall
    assert len(set(acked) | {pk for _, pk in theirs}) == len(acked) + len(theirs)


@pytest.mark.serial  # counts claims per time window of the rate limit
def test_rate__concurrent_claimers__within_the_bound_over_every_window(
    db_url: str, tmp_path: Path
) -> None:
    rate, seconds = 10.0, 3.0
    queues.update("metered", {"rate_per_s": rate})
    fill("metered", 500)
    procs = children(db_url, tmp_path, "metered", seconds, "rate")
    times: list[float] = []
    start = time.time()

    def claim_one_at_a_time() -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            got = queue.claim(["metered"], 60_000)
            if got:
                times.append(time.time())
                queue.ack(got[0].task.pk, lease_id=got[0].lease_id)
            else:
                time.sleep(0.001)

    for t in threads(claim_one_at_a_time):
        t.join()
    times += [at for at, _ in child_results(procs, tmp_path)]
    times.sort()
    elapsed = times[-1] - start
    # All of it: at most rate x T + max(1, rate), and not far below (the limit is not stuck).
    assert rate * elapsed - 3 <= len(times) <= rate * elapsed + max(1, rate) + 1, len(times)
    # Every window from each claim: T = 0.25 s to the whole run. One claim of slack: times are
    # taken when the answer arrives, a few ms after the database's clock counted the token.
    for i, first in enumerate(times):
        for span in (0.25, 0.5, 1.0, 2.0):
            inside = sum(1 for t in times[i:] if t - first <= span)
            assert inside <= rate * span + max(1, rate) + 1, (first - start, span, inside)


@pytest.mark.serial  # times the next token of the rate limit
def test_rate__parked_claimer__gets_its_task_when_the_next_token_comes() -> None:
    queues.update("drip", {"rate_per_s": 2})
    fill("drip", 5)
    assert len(queue.claim(["drip"], 60_000, limit=5)) == 2  # the bucket's 2 tokens
    start = time.monotonic()
    got = claim_wait(["drip"], lease_ms=60_000, wait_ms=10_000)
    waited = time.monotonic() - start
    assert len(got) == 1
    assert 0.3 <= waited <= 1.5, waited  # one token: 0.5 s, not the end of the 10 s wait


# A woken claim answers in milliseconds; without its wake it would answer at the end of its 10 s
# wait. The bound leaves room for a loaded host (two test processes, PostgreSQL: 0.55 s seen).
WOKEN_WITHIN_S = 2.0


def _parked(queues_: list[str], wait_ms: int = 10_000) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["got"] = claim_wait(queues_, lease_ms=60_000, wait_ms=wait_ms)
            out["at"] = time.monotonic()
        finally:
            connection.close()

    out["thread"] = threading.Thread(target=run)
    out["thread"].start()
    time.sleep(0.3)  # parked: its two looks are done
    assert "got" not in out
    return out


def _freeing_wakes_a_parked_claimer(name: str, free: str) -> None:
    """Hold the queue's one claimable task, park a claimer, end the held task by `free`: the
    claimer gets the next task within WOKEN_WITHIN_S, not at the end of its 10 s wait."""
    (held,) = queue.claim([name], 60_000 if free != "reclaim" else 1)
    parked = _parked([name])
    start = time.monotonic()
    if free == "reclaim":
        assert queue.reclaim_expired() == 1
    else:
        settle(held.task.pk, held.lease_id, free)
    parked["thread"].join(5)
    assert len(parked["got"]) == 1
    assert parked["at"] - start < WOKEN_WITHIN_S, parked["at"] - start


@pytest.mark.parametrize("free", ["ack", "nack", "cancel", "reclaim"])
def test_max_in_flight__freed_slot__wakes_a_parked_claimer_at_once(free: str) -> None:
    queues.update("one", {"max_in_flight": 1})
    fill("one", 3)
    _freeing_wakes_a_parked_claimer("one", free)


@pytest.mark.parametrize("setting", ["key_max_in_flight", "ordered"])
@pytest.mark.parametrize("free", ["ack", "nack", "cancel", "reclaim"])
def test_key__freed_turn_or_slot__wakes_a_parked_claimer_at_once(setting: str, free: str) -> None:
    queues.update("keyed", {"key_max_in_flight": 1} if setting != "ordered" else {"ordered": True})
    # One attempt: a nacked or lapsed task ends (dead); a retrying one would keep its key's turn.
    queue.enqueue_many(
        [NewTask(payload=json.dumps(i), queue="keyed", key="k", max_attempts=1) for i in range(3)]
    )
    _freeing_wakes_a_parked_claimer("keyed", free)


def test_pause__resume__wakes_parked_claimers_at_once() -> None:
    queues.update("held", {"paused": True})
    fill("held", 2)
    first, second = _parked(["held"]), _parked([])  # one of the queue, one of every queue
    start = time.monotonic()
    queues.update("held", {"paused": False})
    for parked in (first, second):
        parked["thread"].join(5)
        assert len(parked["got"]) == 1
        assert parked["at"] - start < WOKEN_WITHIN_S, parked["at"] - start


def test_schedule__eight_sweeps_at_once_at_one_due_time__one_task() -> None:
    from datetime import UTC, datetime

    from broker import schedules
    from broker.models import Schedule

    schedules.create({"name": "race", "every_s": 60, "job": {"payload": 1, "queue": "raced"}})
    Schedule.objects.filter(name="race").update(next_run_at=datetime(2020, 1, 1, tzinfo=UTC))
    go = threading.Barrier(8)
    fired: list[int] = []

    def sweep() -> None:
        go.wait()
        fired.append(schedules.fire_due())

    for t in threads(sweep, 8):
        t.join()
    assert sorted(fired) == [0] * 7 + [1]
    assert Task.objects.filter(queue="raced").count() == 1

"""A move that makes tasks ready (requeue, promote) wakes a parked claimer of their own queue,
even when another queue's claimer parked first."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.procs import gunicorn, http, sweeping

pytestmark = [pytest.mark.postgres]


def _park(base: str, queue: str, out: dict, wait_ms: int = 6000) -> threading.Thread:
    def run() -> None:
        start = time.monotonic()
        out["status"], out["body"] = http(
            "GET", f"{base}/jobs/next?wait_ms={wait_ms}&queue={queue}", timeout=30
        )
        out["waited"] = time.monotonic() - start

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _dead_task(base: str, queue: str) -> str:
    task_id = http("POST", f"{base}/jobs", {"payload": "x", "queue": queue, "max_attempts": 1})[1]
    got = http("GET", f"{base}/jobs/next?wait_ms=0&queue={queue}")[1]
    nack = f"{base}/jobs/{task_id['id']}/nack?lease_id={got['lease_id']}"
    assert http("POST", nack, {"error": "boom"})[0] == 204
    return str(task_id["id"])


def _requeue_at_once(base: str, task_id: str, n: int) -> list[int]:
    """n requeues of one task sent together: their statuses."""
    start = threading.Barrier(n)
    answers: list[int] = []

    def requeue() -> None:
        start.wait()
        answers.append(http("POST", f"{base}/dlq/{task_id}/requeue")[0])

    racers = [threading.Thread(target=requeue) for _ in range(n)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(15)
    return answers


def test_requeue__other_queues_claimer_parked_first__its_own_claimer_woken(
    db_url: str, tmp_path: Path
) -> None:
    with gunicorn(db_url, tmp_path, "b", WORKERS="1") as b:
        dead = _dead_task(b, "rq_b")
        first, second = {}, {}
        t1 = _park(b, "rq_a", first)
        time.sleep(0.3)
        t2 = _park(b, "rq_b", second)
        time.sleep(0.3)
        assert http("POST", f"{b}/dlq/{dead}/requeue")[0] == 204
        t2.join(15)
        t1.join(15)
        assert second["status"] == 200, second
        assert second["body"]["task"]["id"] == dead
        assert second["waited"] < 0.3 + 2.0, second["waited"]
        assert first["status"] == 204


def test_requeue__racing_requeues_of_one_task__a_parked_claimer_still_gets_it(
    db_url: str, tmp_path: Path
) -> None:
    """The requeues that lose wait for the winner's row lock and, finding the task no longer
    dead, hold that lock until they end: the claim the winner woke passes the row by (SKIP
    LOCKED) and must look again, or the task sits ready beside parked claimers."""
    with gunicorn(db_url, tmp_path, "b", WORKERS="1", GUNICORN_THREADS="16") as b:
        for round_ in range(8):
            queue = f"race{round_}"
            dead = _dead_task(b, queue)
            claimer: dict = {}
            parked = _park(b, queue, claimer, wait_ms=5000)
            time.sleep(0.3)
            answers = _requeue_at_once(b, dead, 4)
            parked.join(15)
            assert sorted(answers) == [204, 404, 404, 404]
            assert claimer["status"] == 200, (round_, claimer)
            assert claimer["body"]["task"]["id"] == dead
            assert claimer["waited"] < 0.3 + 2.0, (round_, claimer["waited"])


def test_promote__other_queues_claimer_parked_first__its_own_claimer_woken(
    db_url: str, tmp_path: Path
) -> None:
    with (
        gunicorn(db_url, tmp_path, "b", WORKERS="1") as b,
        sweeping(db_url, tmp_path, 50),
    ):
        first, second = {}, {}
        t1 = _park(b, "pr_a", first)
        time.sleep(0.3)
        t2 = _park(b, "pr_b", second)
        time.sleep(0.3)
        status, body = http("POST", f"{b}/jobs", {"payload": 1, "queue": "pr_b", "delay_ms": 300})
        assert status == 201
        t2.join(15)
        t1.join(15)
        assert second["status"] == 200 and second["body"]["task"]["id"] == body["id"], second
        assert second["waited"] < 0.6 + 2.0, second["waited"]
        assert first["status"] == 204

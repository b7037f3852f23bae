"""runworker's default prefetch mode end to end: gunicorn, runsweeper, runworker on PostgreSQL."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.procs import enqueue_batch, gunicorn, http, manage, running, sweeping, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

FAST_RETRY = {"BROKER_RETRY_BASE_MS": "100", "BROKER_RETRY_MAX_MS": "200"}


def _stats(base: str) -> dict:
    return http("GET", f"{base}/stats")[1]


def _worker(base: str, db_url: str, tmp: Path, name: str, *args: str):
    log = tmp / f"{name}-jobs.log"
    return manage(
        ["runworker", "--broker", base, "--log-file", str(log), "--wait-ms", "2000", *args],
        db_url, tmp, name, LOG_LEVEL="INFO",
    )  # fmt: skip


def _enqueue_sleeps(base: str, n: int, seconds: float) -> list[str]:
    jobs = [{"type": "sleep_job", "payload": {"duration_seconds": seconds}} for _ in range(n)]
    return enqueue_batch(base, jobs)


def test_prefetch__produce_400__each_line_once_all_acked_exit_0(
    db_url: str, tmp_path: Path
) -> None:
    with gunicorn(db_url, tmp_path) as base:
        producing = manage(["produce", "--broker", base, "-n", "400", "--batch", "100"],
                           db_url, tmp_path, "produce")  # fmt: skip
        assert producing.wait(60) == 0, producing.output()
        producing.stop()
        worker = _worker(base, db_url, tmp_path, "worker", "--concurrency", "3")
        with running(worker):
            wait_until(lambda: _stats(base)["totals"]["acked"] == 400, 60, what="400 acks")
            # Idle now, parked: every ack was already sent, nothing is held.
            time.sleep(0.5)
            stats = _stats(base)

    said = worker.log_path.read_text()
    assert worker.popen.returncode == 0, said
    assert "prefetch 64 (up to 192 tasks in hand)" in said
    assert "refused" not in said
    lines = [json.loads(line) for line in (tmp_path / "worker-jobs.log").read_text().splitlines()]
    assert sorted(line["payload"]["line"] for line in lines) == sorted(
        f"hello {n}" for n in range(1, 401)
    )
    assert stats["totals"]["acked"] == 400
    assert all(stats[k] == 0 for k in ("ready", "handed_out", "delayed", "dead"))


def test_prefetch__sigterm_mid_drain__settles_all_it_holds_then_another_finishes(
    db_url: str, tmp_path: Path
) -> None:
    with gunicorn(db_url, tmp_path, **FAST_RETRY) as base:
        ids = _enqueue_sleeps(base, 60, 0.05)
        first = _worker(base, db_url, tmp_path, "first", "--concurrency", "3", "--prefetch", "4")
        wait_until(lambda: _stats(base)["totals"]["acked"] >= 6, 30, what="the drain to start")

        first.send(signal.SIGTERM)
        assert first.wait(20) == 0, first.output()
        after_stop = _stats(base)
        first.stop()

        with running(_worker(base, db_url, tmp_path, "second", "--concurrency", "3")):
            wait_until(lambda: _stats(base)["totals"]["acked"] == 60, 60, what="60 acks")
        final = _stats(base)

    # Everything the first worker held (prefetched too) was run and acked before it exited.
    assert after_stop["handed_out"] == 0
    assert 6 <= after_stop["totals"]["acked"] < 60
    # Each task was handed out once: nothing the first worker held was left to expire.
    assert final["totals"]["delivered"] == len(ids) == 60
    assert (final["totals"]["reclaimed"], final["totals"]["nacked"]) == (0, 0)
    assert "refused" not in first.log_path.read_text()


def test_sigterm_while_parked__a_task_enqueued_after_it_is_not_taken(
    db_url: str, tmp_path: Path
) -> None:
    """SIGTERM: stop claiming. The parked claims hang up at once, so a task enqueued just after
    the signal stays ready for another worker (the grace once let them take it, and run it)."""
    with gunicorn(db_url, tmp_path) as base:
        first = enqueue_batch(base, [{"payload": {"n": 1}}])[0]
        worker = _worker(base, db_url, tmp_path, "w", "--wait-ms", "20000", "--concurrency", "3")
        wait_until(lambda: _stats(base)["totals"]["acked"] == 1, 30, what="the first ack")
        time.sleep(0.5)  # its claims parked again
        worker.send(signal.SIGTERM)
        time.sleep(0.3)
        late = enqueue_batch(base, [{"payload": {"n": 2}}])[0]
        assert worker.wait(10) == 0, worker.output()
        worker.stop()
        task = http("GET", f"{base}/jobs/{late}")[1]
        assert (task["state"], task["attempts"]) == ("ready", 0)
        assert http("GET", f"{base}/jobs/{first}")[1]["state"] == "done"


def test_prefetch__kill_9_mid_drain__held_tasks_come_back_and_finish(
    db_url: str, tmp_path: Path
) -> None:
    with (
        gunicorn(db_url, tmp_path, **FAST_RETRY) as base,
        sweeping(db_url, tmp_path, 50, **FAST_RETRY),
    ):
        _enqueue_sleeps(base, 40, 0.05)
        doomed = _worker(base, db_url, tmp_path, "doomed", "--lease-ms", "1500")
        wait_until(lambda: _stats(base)["totals"]["acked"] >= 3, 30, what="the drain to start")
        wait_until(lambda: _stats(base)["handed_out"] > 0, 10, what="tasks in hand")

        doomed.send(signal.SIGKILL)
        doomed.wait(10)
        doomed.stop()
        with running(_worker(base, db_url, tmp_path, "rescuer", "--lease-ms", "1500")):
            wait_until(lambda: _stats(base)["totals"]["acked"] == 40, 60, what="40 acks")
        final = _stats(base)

    assert final["totals"]["reclaimed"] >= 1  # what the killed worker held came back
    assert all(final[k] == 0 for k in ("ready", "handed_out", "delayed", "dead"))

"""The original design's "things to try", with real processes on PostgreSQL."""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path

import pytest

from tests.procs import gunicorn, http, manage, running, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def _stats(base: str) -> dict:
    return http("GET", f"{base}/stats")[1]


def _lines(log_file: Path) -> list[dict]:
    if not log_file.exists():
        return []
    return [json.loads(line) for line in log_file.read_text().splitlines()]


def _produce(base: str, db_url: str, tmp: Path, *args: str, timeout: float = 60) -> str:
    proc = manage(["produce", "--broker", base, *args], db_url, tmp, "produce")
    assert proc.wait(timeout) == 0, proc.output()
    out = proc.output()
    proc.stop()
    return out


def _worker(base: str, db_url: str, tmp: Path, log_file: Path, name: str = "worker", *args: str):
    return manage(
        ["runworker", "--broker", base, "--log-file", str(log_file), "--wait-ms", "2000", *args],
        db_url,
        tmp,
        name,
        LOG_LEVEL="INFO",
    )


@contextmanager
def broker(db_url: str, tmp: Path, *sweeper_args: str) -> Iterator[str]:
    """gunicorn and runsweeper (with sweeper_args) on the test database: the broker's base URL."""
    with (
        gunicorn(db_url, tmp) as base,
        running(manage(["runsweeper", *sweeper_args], db_url, tmp, "sweeper")),
    ):
        yield base


def _at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _gauges_zero(stats: dict) -> bool:
    return all(stats[k] == 0 for k in ("ready", "handed_out", "delayed", "dead"))


def test_retries_and_dlq__5_failing_tasks__3_attempts_with_backoff_then_dead(
    db_url: str, tmp_path: Path, log_file: Path
) -> None:
    with (
        broker(db_url, tmp_path, "--interval-ms", "50") as base,
        running(_worker(base, db_url, tmp_path, log_file, "worker", "--concurrency", "3")),
    ):
        _produce(base, db_url, tmp_path, "-n", "5", "--fail", "--max-attempts", "3")
        wait_until(lambda: _stats(base)["dead"] == 5, 30, what="five dead tasks")
        dead = http("GET", f"{base}/dlq")[1]["results"]
        assert len(dead) == 5
        for task in dead:
            assert task["attempts"] == 3
            assert task["last_error"]
            times = [_at(e["at"]) for e in task["errors"]]
            assert [e["attempt"] for e in task["errors"]] == [1, 2, 3]
            gaps = [b - a for a, b in itertools.pairwise(times)]
            # Backoff 0.5-1 s then 1-2 s; the sweeper's tick and the claim add a little.
            assert 0.5 <= gaps[0] <= 1.4, gaps
            assert 1.0 <= gaps[1] <= 2.4, gaps
        totals = _stats(base)["totals"]
        assert totals["nacked"] == 15 and totals["buried"] == 5 and totals["retried"] == 10


def test_delayed__10_tasks_5s__stay_delayed_then_drain(
    db_url: str, tmp_path: Path, log_file: Path
) -> None:
    with (
        broker(db_url, tmp_path) as base,
        running(_worker(base, db_url, tmp_path, log_file)),
    ):
        start = time.monotonic()
        _produce(base, db_url, tmp_path, "-n", "10", "--delay-ms", "5000")
        assert _stats(base)["delayed"] == 10
        time.sleep(max(0.0, 4.0 - (time.monotonic() - start)))
        stats = _stats(base)
        assert stats["delayed"] == 10 and stats["totals"]["acked"] == 0
        wait_until(lambda: _stats(base)["totals"]["acked"] == 10, 10, what="the drain")
        assert time.monotonic() - start >= 5.0
        assert len(_lines(log_file)) == 10


@pytest.mark.parametrize(
    ("n", "producers", "workers", "timeout"),
    [
        pytest.param(100, "1", {"worker": "3"}, 30, id="happy_path__100_tasks_3_threads"),
        pytest.param(
            2000, "50", {"w1": "1", "w2": "1", "w3": "1"}, 120,
            id="contention__2000_tasks_50_producers_3_workers",
        ),
    ],
)  # fmt: skip
def test_produce_and_work__every_task_one_whole_line__none_twice(
    db_url: str,
    tmp_path: Path,
    log_file: Path,
    n: int,
    producers: str,
    workers: dict[str, str],
    timeout: float,
) -> None:
    with broker(db_url, tmp_path) as base, ExitStack() as stack:
        for name, threads in workers.items():
            stack.enter_context(
                running(_worker(base, db_url, tmp_path, log_file, name, "--concurrency", threads))
            )
        out = _produce(
            base, db_url, tmp_path, "-n", str(n), "--concurrency", producers, timeout=timeout
        )
        assert f"sent {n}" in out and "rejected 0" in out
        wait_until(lambda: _stats(base)["totals"]["acked"] == n, timeout, 0.5, f"{n} acks")
        lines = _lines(log_file)
        assert len(lines) == n
        assert len({line["id"] for line in lines}) == n
        assert all(set(line) == {"id", "payload"} for line in lines)
        stats = _stats(base)
        assert stats["totals"]["delivered"] == n
        assert _gauges_zero(stats)


def test_crash_recovery__kill_9_worker_holding_a_task__reclaimed_and_done(
    db_url: str, tmp_path: Path, log_file: Path
) -> None:
    with broker(db_url, tmp_path, "--interval-ms", "100") as base:
        doomed = _worker(
            base, db_url, tmp_path, log_file, "doomed", "--concurrency", "1", "--lease-ms", "1500"
        )
        with running(doomed):
            time.sleep(3)  # booted and parked in GET /jobs/next
            # Frozen, it cannot run the task it is about to be handed, nor ack it.
            doomed.send(signal.SIGSTOP)
            tid = http("POST", f"{base}/jobs", {"payload": {"line": "survivor"}})[1]["id"]
            wait_until(lambda: _stats(base)["handed_out"] == 1, 5, what="the hand-out")
            doomed.kill_group(signal.SIGKILL)
        with running(_worker(base, db_url, tmp_path, log_file, "rescuer")):
            wait_until(lambda: _stats(base)["totals"]["acked"] == 1, 20, what="the rescue")
        task = http("GET", f"{base}/jobs/{tid}")[1]
        assert task["state"] == "done" and task["attempts"] == 2
        assert _stats(base)["totals"]["reclaimed"] == 1
        assert [line["id"] for line in _lines(log_file)] == [tid]


def test_graceful_stop__sigterm_under_load__exit_0_nothing_lost(
    db_url: str, tmp_path: Path, log_file: Path
) -> None:
    with broker(db_url, tmp_path) as base:
        _produce(base, db_url, tmp_path, "-n", "300", "--concurrency", "4")
        worker = _worker(base, db_url, tmp_path, log_file, "stopping", "--concurrency", "3")
        with running(worker):
            wait_until(lambda: _stats(base)["totals"]["acked"] >= 30, 30, what="some progress")
            worker.send(signal.SIGTERM)
            assert worker.wait(30) == 0, worker.output()
        assert _stats(base)["handed_out"] == 0  # nothing left held by the stopped worker
        with running(_worker(base, db_url, tmp_path, log_file, "finisher", "--concurrency", "3")):
            wait_until(lambda: _stats(base)["totals"]["acked"] == 300, 60, what="the rest")
        stats = _stats(base)
        assert stats["totals"]["reclaimed"] == 0 and _gauges_zero(stats)
        assert len({line["id"] for line in _lines(log_file)}) == 300

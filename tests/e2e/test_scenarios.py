"""The original design's "things to try", with real processes on PostgreSQL."""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path

import pytest

from tests.procs import gunicorn, http, manage, running, sweeping, wait_until

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


@pytest.fixture(scope="module")
def shared_broker(live_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """gunicorn (two processes) and a sweeper every 50 ms for the module: its base URL."""
    tmp = tmp_path_factory.mktemp("scenarios")
    with (
        gunicorn(live_db_url, tmp) as base,
        sweeping(live_db_url, tmp, 50),
    ):
        yield base


@pytest.fixture
def base(shared_broker: str, db_url: str) -> str:
    """The module's broker, on tables the test empties when it ends."""
    return shared_broker


def _at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _gauges_zero(stats: dict) -> bool:
    return all(stats[k] == 0 for k in ("ready", "handed_out", "delayed", "dead"))


def test_retries_and_dlq__5_failing_tasks__3_attempts_with_backoff_then_dead(
    base: str, db_url: str, tmp_path: Path, log_file: Path
) -> None:
    with running(_worker(base, db_url, tmp_path, log_file, "worker", "--concurrency", "3")):
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
    base: str, db_url: str, tmp_path: Path, log_file: Path
) -> None:
    with running(_worker(base, db_url, tmp_path, log_file)):
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
            marks=pytest.mark.slow,  # a load test: make test-slow
        ),
    ],
)  # fmt: skip
def test_produce_and_work__every_task_one_whole_line__none_twice(
    base: str,
    db_url: str,
    tmp_path: Path,
    log_file: Path,
    n: int,
    producers: str,
    workers: dict[str, str],
    timeout: float,
) -> None:
    with ExitStack() as stack:
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
    base: str, db_url: str, tmp_path: Path, log_file: Path
) -> None:
    doomed = _worker(
        base, db_url, tmp_path, log_file, "doomed", "--concurrency", "1", "--lease-ms", "1500"
    )
    with running(doomed):
        # Booted (its start line), then parked in GET /jobs/next a moment later.
        wait_until(lambda: b"worker on " in doomed.log_path.read_bytes(), 30, what="the boot")
        time.sleep(1)
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
    base: str, db_url: str, tmp_path: Path, log_file: Path
) -> None:
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


def test_produce_key_into_an_ordered_queue__3_threads_run_the_key_in_enqueue_order(
    base: str, db_url: str, tmp_path: Path, log_file: Path
) -> None:
    n = 30
    assert http("PATCH", f"{base}/queues/ledger", {"ordered": True})[0] == 200
    out = _produce(base, db_url, tmp_path, "-n", str(n), "--queue", "ledger", "--key", "acct-7")
    assert f"sent {n}" in out
    with running(
        _worker(base, db_url, tmp_path, log_file, "worker", "--concurrency", "3",
                "--queue", "ledger")
    ):  # fmt: skip
        wait_until(lambda: _stats(base)["totals"]["acked"] == n, 60, 0.5, f"{n} acks")
    # One at a time, in the order produce sent them, however many threads claim.
    assert [line["payload"]["line"] for line in _lines(log_file)] == [
        f"hello {i}" for i in range(1, n + 1)
    ]
    listed = http("GET", f"{base}/jobs?key=acct-7&limit=100")[1]["results"]
    assert len(listed) == n and {task["key"] for task in listed} == {"acct-7"}

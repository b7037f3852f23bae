"""make bench: per-task CPU in-process (bench/inprocess.py), then the broker's throughput and
wake-up latency on a fresh PostgreSQL database.

Starts gunicorn from gunicorn.conf.py (plus a second broker process for the cross-process wake test)
and the sweeper, then measures with http.client (one keep-alive connection per thread) and prints a
table; the figures also go to bench-out/bench.json. Not a test: nothing here passes or fails.
`python bench/bench.py keys` measures the key claims alone, `python bench/bench.py unique` batches
of 1000 unique items beside plain ones, `python bench/bench.py wake` the wake-ups alone (a claim
parked on the node, the task sent to the same node and to the second one).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from harness import (
    ROOT,
    VENV_BIN,
    Conn,
    broker_database,
    free_port,
    rss_mb,
    start,
    stop,
    wait_healthy,
)

N = int(os.environ.get("BENCH_N", "5000"))
BULK_N = int(os.environ.get("BENCH_BULK_N", "20000"))
FINISHED_ROWS = int(os.environ.get("BENCH_FINISHED_ROWS", "1000000"))
WAKE_N = int(os.environ.get("BENCH_WAKE_N", "200"))
PRODUCERS = int(os.environ.get("BENCH_PRODUCERS", "4"))
WORKERS = 3


def in_threads(n: int, target: Callable[[int], None]) -> float:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def enqueue_single(port: int, n: int) -> float:
    def producer(i: int) -> None:
        c = Conn(port)
        for k in range(i, n, PRODUCERS):
            status, _ = c.call("POST", "/jobs", {"payload": {"line": f"hello {k}"}})
            assert status == 201, status

    return n / in_threads(PRODUCERS, producer)


def enqueue_bulk(port: int, n: int, size: int = 500, unique: str | None = None) -> float:
    """Tasks a second by POST /jobs/batch of `size` items, two producers; with `unique`, each
    item has a unique key of its own (`unique` + its number: all new)."""

    def producer(i: int) -> None:
        c = Conn(port)
        for start_at in range(i * size, n, 2 * size):
            jobs: list[dict[str, Any]] = [
                {"payload": {"line": f"hello {k}"}} for k in range(start_at, start_at + size)
            ]
            if unique is not None:
                for k, job in enumerate(jobs, start_at):
                    job["unique"] = {"key": f"{unique}-{k}"}
            status, _ = c.call("POST", "/jobs/batch", {"jobs": jobs})
            assert status == 201, status

    return n / in_threads(2, producer)


def unique_bulk(port: int, n: int) -> dict[str, Any]:
    """POST /jobs/batch of 1000 items with a unique key each (all new) beside 1000 plain ones,
    alternately on one connection so both see the same machine (a shared one is noisy): the
    median time of each, and their ratio; then the tasks are drained (docs/unique.md)."""
    c = Conn(port)
    prefix = f"bench-{time.time_ns()}"
    times: dict[str, list[float]] = {"plain": [], "unique": []}
    rounds = max(1, n // 2000)
    for r in range(rounds):
        for kind in ("plain", "unique"):
            jobs: list[dict[str, Any]] = [{"payload": {"line": f"hello {k}"}} for k in range(1000)]
            if kind == "unique":
                for k, job in enumerate(jobs):
                    job["unique"] = {"key": f"{prefix}-{r}-{k}"}
            started = time.perf_counter()
            status, _ = c.call("POST", "/jobs/batch", {"jobs": jobs})
            times[kind].append(time.perf_counter() - started)
            assert status == 201, status
    drain(port, rounds * 2000, batch=True)
    plain, unique = (statistics.median(times[k]) for k in ("plain", "unique"))
    return {
        "bulk1000_plain_ms": round(1000 * plain, 1),
        "bulk1000_unique_ms": round(1000 * unique, 1),
        "bulk1000_unique_time_vs_plain": round(unique / plain, 2),
    }


def drain(port: int, n: int, batch: bool) -> float:
    """Three worker threads until n tasks are acked; rate from the first to the last ack."""
    done = 0
    lock = threading.Lock()
    stamps: list[float] = []

    def worker(_: int) -> None:
        nonlocal done
        c = Conn(port)
        while True:
            with lock:
                if done >= n:
                    return
            if batch:
                status, body = c.call("POST", "/jobs/claim", {"max": 10, "wait_ms": 500})
                if status == 204:
                    continue
                acks = [
                    {"id": d["task"]["id"], "lease_id": d["lease_id"]} for d in body["deliveries"]
                ]
                c.call("POST", "/jobs/ack", {"acks": acks})
                got = len(acks)
            else:
                status, body = c.call("GET", "/jobs/next?wait_ms=500")
                if status == 204:
                    continue
                c.call("POST", f"/jobs/{body['task']['id']}/ack?lease_id={body['lease_id']}")
                got = 1
            with lock:
                done += got
                stamps.append(time.perf_counter())

    in_threads(WORKERS, worker)
    return (n - 1) / (max(stamps) - min(stamps))


def wake(parked_port: int, enqueue_port: int) -> tuple[float, float]:
    claimer, producer = Conn(parked_port), Conn(enqueue_port)
    samples = []
    for i in range(WAKE_N):
        box: dict[str, float] = {}

        def park(box: dict[str, float] = box) -> None:
            _status, body = claimer.call("GET", "/jobs/next?wait_ms=5000")
            box["at"] = time.perf_counter()
            claimer.call("POST", f"/jobs/{body['task']['id']}/ack?lease_id={body['lease_id']}")

        t = threading.Thread(target=park)
        t.start()
        time.sleep(0.02)
        t0 = time.perf_counter()
        producer.call("POST", "/jobs", {"payload": {"wake": i}})
        t.join()
        samples.append((box["at"] - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[max(0, int(len(samples) * 0.99) - 1)]


def fill(dsn: str, rows: int, state: str, queue: str) -> None:
    """Inserts rows straight into the table (the API would take minutes for a million)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """INSERT INTO broker_task (state, queue, priority, payload, attempts, max_attempts,
                   available_at, created_at, updated_at)
               SELECT %s, %s, 1, '{"line": "old"}', 1, 3, now(), now(), now()
               FROM generate_series(1, %s)""",
            [state, queue, rows],
        )
        conn.execute("VACUUM ANALYZE broker_task")
        checkpoint(conn)


def checkpoint(conn: psycopg.Connection) -> None:
    # Flush the dirty pages now: a checkpoint triggered by the fill's WAL, landing in the middle
    # of the next drain, would time the disk, not the queue.
    conn.execute("CHECKPOINT")


def inprocess(cycles: int = 1000) -> dict[str, float]:
    """bench/inprocess.py's CPU per task (the WSGI app called in-process: the stable figure)."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "inprocess.py"), "--cycles", str(cycles)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    figures = {}
    for line in run.stdout.splitlines():
        name, cpu_ms, *_ = line.split()
        figures[f"inprocess_{name}_cpu_ms_per_task"] = float(cpu_ms)
    return figures


def claim_beside_backlog(dsn: str, port: int, backlog: int) -> float:
    """Median ms of a claim on two empty queues while `backlog` tasks wait in another queue."""
    fill(dsn, backlog, "ready", "backlog")
    client = Conn(port)
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        status, _ = client.call("GET", "/jobs/next?wait_ms=0&queue=empty_a,empty_b")
        times.append((time.perf_counter() - t0) * 1000)
        assert status == 204, status
    return statistics.median(times)


def release_shapes(port: int) -> dict[str, float]:
    """ms of the one ack that releases: the child of 100 parents (the most `after` allows), and
    the 1000 children of one parent. Each a median of 5 rounds."""
    client = Conn(port)

    def held(queue: str, n: int) -> list[tuple[str, str]]:
        client.call("POST", "/jobs/batch", {"jobs": [{"payload": i, "queue": queue}
                                                     for i in range(n)]})  # fmt: skip
        got = client.call("POST", "/jobs/claim", {"max": n, "wait_ms": 0, "queues": [queue]})[1]
        return [(d["task"]["id"], d["lease_id"]) for d in got["deliveries"]]

    def last_ack(task: tuple[str, str]) -> float:
        t0 = time.perf_counter()
        status, _ = client.call("POST", f"/jobs/{task[0]}/ack?lease_id={task[1]}")
        assert status == 204, status
        return (time.perf_counter() - t0) * 1000

    fan_in, fan_out = [], []
    for r in range(5):
        parents = held(f"fan-in-{r}", 100)
        child = {"payload": "c", "queue": f"fan-in-child-{r}", "after": [p for p, _ in parents]}
        assert client.call("POST", "/jobs", child)[0] == 201
        acks = [{"id": p, "lease_id": lease} for p, lease in parents[:-1]]
        client.call("POST", "/jobs/ack", {"acks": acks})
        fan_in.append(last_ack(parents[-1]))
        (parent,) = held(f"fan-out-{r}", 1)
        children = [{"payload": i, "queue": f"fan-out-child-{r}", "after": [parent[0]]}
                    for i in range(1000)]  # fmt: skip
        assert client.call("POST", "/jobs/batch", {"jobs": children})[0] == 201
        fan_out.append(last_ack(parent))
    return {
        "release_child_of_100_parents_ms": round(statistics.median(fan_in), 2),
        "release_1000_children_of_one_parent_ms": round(statistics.median(fan_out), 2),
    }


KEYS = int(os.environ.get("BENCH_KEYS", "10000"))
KEYED_BACKLOG = int(os.environ.get("BENCH_KEYED_BACKLOG", "300000"))


def claim_cycles(port: int, queue: str, rounds: int = 300) -> float:
    """Median ms of a one-task claim from `queue` (each claimed task acked, untimed)."""
    client = Conn(port)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        status, got = client.call(
            "POST", "/jobs/claim", {"max": 1, "wait_ms": 0, "queues": [queue]}
        )
        times.append((time.perf_counter() - t0) * 1000)
        assert status == 200, status
        (d,) = got["deliveries"]
        assert (
            client.call("POST", f"/jobs/{d['task']['id']}/ack?lease_id={d['lease_id']}")[0] == 204
        )
    return statistics.median(times)


def key_claims(dsn: str, port: int) -> dict[str, float]:
    """Claims from a plain queue, a fair one and an ordered one, each beside a big keyed backlog:
    KEYED_BACKLOG ready tasks over KEYS keys (plain and fair), KEYS keys of 5 tasks (ordered)."""
    client = Conn(port)
    for start_at in range(0, 300, 100):
        jobs = [{"payload": i, "queue": "alone"} for i in range(start_at, start_at + 100)]
        assert client.call("POST", "/jobs/batch", {"jobs": jobs})[0] == 201
    alone = claim_cycles(port, "alone")  # the same cycle with no key anywhere near: the baseline
    assert client.call("PATCH", "/queues/fair", {"fair": True})[0] == 200
    assert client.call("PATCH", "/queues/ordered", {"ordered": True})[0] == 200
    with psycopg.connect(dsn, autocommit=True) as conn:
        for queue in ("plain", "fair"):
            conn.execute(
                """INSERT INTO broker_task (state, queue, priority, payload, attempts,
                       max_attempts, available_at, created_at, updated_at, key)
                   SELECT 'ready', %s, 1, '{"line": "keyed"}', 0, 3, now(), now(), now(),
                          'k' || (g %% %s) FROM generate_series(1, %s) g""",
                [queue, KEYS, KEYED_BACKLOG],
            )
            conn.execute(
                """INSERT INTO broker_keystate (queue, key, served_at)
                   SELECT %s, 'k' || g, '1970-01-01' FROM generate_series(0, %s) g""",
                [queue, KEYS - 1],
            )
    for start_at in range(0, KEYS * 5, 500):  # through the API: each waits for its key's last
        jobs = [{"payload": i, "queue": "ordered", "key": f"k{i % KEYS}"}
                for i in range(start_at, start_at + 500)]  # fmt: skip
        assert client.call("POST", "/jobs/batch", {"jobs": jobs})[0] == 201
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        checkpoint(conn)
    return {
        "claim_plain_keyless_ms": round(alone, 2),
        f"claim_plain_beside_{KEYED_BACKLOG // 1000}k_keyed_ms": round(
            claim_cycles(port, "plain"), 2
        ),
        f"claim_fair_{KEYS}_keys_{KEYED_BACKLOG // 1000}k_backlog_ms": round(
            claim_cycles(port, "fair"), 2
        ),
        f"claim_ordered_{KEYS}_keys_x5_ms": round(claim_cycles(port, "ordered"), 2),
    }


def everything(
    results: dict[str, Any], dsn: str, port: int, port_b: int, procs: list[subprocess.Popen]
) -> None:
    results["rss_mb_before"] = round(rss_mb(procs[0]), 1)
    results["enqueue_single_per_s"] = round(enqueue_single(port, N))
    results["drain_single_per_s"] = round(drain(port, N, batch=False))
    results["enqueue_bulk_per_s"] = round(enqueue_bulk(port, BULK_N))
    results["drain_batch_per_s"] = round(drain(port, BULK_N, batch=True))
    results.update(unique_bulk(port, BULK_N))
    p50, p99 = wake(port, port_b)
    results["wake_p50_ms"], results["wake_p99_ms"] = round(p50, 2), round(p99, 2)
    fill(dsn, FINISHED_ROWS, "done", "default")
    enqueue_single(port, N)
    results["drain_single_1m_finished_per_s"] = round(drain(port, N, batch=False))
    results["drain_1m_vs_empty"] = round(
        results["drain_single_1m_finished_per_s"] / results["drain_single_per_s"], 2
    )
    results["rss_mb_after"] = round(rss_mb(procs[0]), 1)
    results["claim_2_empty_queues_beside_300k_ready_ms"] = round(
        claim_beside_backlog(dsn, port, 300_000), 2
    )
    results.update(release_shapes(port))
    results.update(key_claims(dsn, port))


def main() -> None:
    # `python bench/bench.py keys` (or `wake`, `unique`): that part alone.
    only = sys.argv[1] if sys.argv[1:] in (["keys"], ["wake"], ["unique"]) else None
    results: dict[str, Any] = {} if only else dict(inprocess())
    out = ROOT / "bench-out"
    out.mkdir(exist_ok=True)
    with broker_database("bench_broker") as (dsn, env):
        port, port_b = free_port(), free_port()
        gunicorn = str(VENV_BIN / "gunicorn")
        procs = [
            start([gunicorn, "-b", f"127.0.0.1:{port}"], env, out / "gunicorn.log"),
            start(
                [gunicorn, "-b", f"127.0.0.1:{port_b}", "--workers", "1"],
                env,
                out / "gunicorn-b.log",
            ),
            start([sys.executable, "manage.py", "runsweeper"], env, out / "sweeper.log"),
        ]
        results.update(n=N, bulk_n=BULK_N, finished_rows=FINISHED_ROWS)
        try:
            wait_healthy(port)
            wait_healthy(port_b)
            with psycopg.connect(dsn, autocommit=True) as conn:
                checkpoint(conn)
            if only == "keys":
                results.update(key_claims(dsn, port))
            elif only == "unique":
                results.update(unique_bulk(port, BULK_N))
            elif only == "wake":
                for name, (parked, enqueue) in {"": (port, port), "cross_": (port, port_b)}.items():
                    p50, p99 = wake(parked, enqueue)
                    results[f"wake_{name}p50_ms"] = round(p50, 2)
                    results[f"wake_{name}p99_ms"] = round(p99, 2)
            else:
                everything(results, dsn, port, port_b, procs)
        finally:
            for p in procs:
                stop(p, signal.SIGINT)
    report(results, out / (f"bench-{only}.json" if only else "bench.json"))


def report(results: dict[str, object], to: Path) -> None:
    to.write_text(json.dumps(results, indent=2))
    width = max(len(k) for k in results)
    for key, value in results.items():
        print(f"{key:<{width}}  {value}")
    print(f"(also in {to})")


if __name__ == "__main__":
    main()

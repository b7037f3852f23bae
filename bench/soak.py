"""Soak: a steady load for minutes, one task in ten failing; memory per minute, totals at the end.

    python bench/soak.py [--minutes 10] [--rate 50] [--keep-db]

Starts gunicorn (gunicorn.conf.py), the sweeper and 2 runworker processes on a fresh PostgreSQL
database (BENCH_PG, default postgresql://postgres@127.0.0.1:5432), and one producer thread that
enqueues `rate` tasks a second; every tenth asks to fail ({"fail": true}) and so ends dead after 3
attempts. Prints the resident memory of the broker and worker processes every minute, then drains
and prints the totals with their invariants. Not a test: exit 1 only when the totals do not
balance. Process output goes to bench-out/soak/.
"""

from __future__ import annotations

import argparse
import http.client
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
from harness import PG, ROOT, VENV_BIN, Conn, free_port, rss_mb, start, stop, wait_healthy

MAX_ATTEMPTS = 3


class Producer(threading.Thread):
    """Enqueues at a steady rate (catching up after a slow answer, never bursting past it)."""

    def __init__(self, port: int, rate: float, seconds: float) -> None:
        super().__init__(daemon=True)
        self.conn, self.rate, self.seconds = Conn(port), rate, seconds
        self.sent = self.failing = self.errors = 0
        self.statuses: dict[int, int] = {}

    def run(self) -> None:
        started = time.monotonic()
        n = 0
        while (now := time.monotonic()) < started + self.seconds:
            due = started + n / self.rate
            if due > now:
                time.sleep(due - now)
            fail = n % 10 == 9
            body = {
                "payload": {"n": n, "fail": True} if fail else {"n": n},
                "max_attempts": MAX_ATTEMPTS,
            }
            n += 1
            try:
                status, _ = self.conn.call("POST", "/jobs", body)
            except (OSError, http.client.HTTPException):
                self.errors += 1
                continue
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status == 201:
                self.sent += 1
                self.failing += fail


def memory_line(minute: int, procs: dict[str, subprocess.Popen], stats: dict) -> str:
    mem = "  ".join(f"{name} {rss_mb(p):6.1f}" for name, p in procs.items())
    totals = stats["totals"]
    return (
        f"{minute:>3} min | RSS MiB: {mem} | enqueued {totals['enqueued']:>6} "
        f"acked {totals['acked']:>6} dead {stats['dead']:>5} ready {stats['ready']:>4} "
        f"handed_out {stats['handed_out']:>3} delayed {stats['delayed']:>3}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=float, default=50, help="tasks per second")
    parser.add_argument("--keep-db", action="store_true", help="do not drop the database")
    args = parser.parse_args()

    name = f"soak_broker_{int(time.time())}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    out = ROOT / "bench-out" / "soak"
    out.mkdir(parents=True, exist_ok=True)
    jobs_log = Path(tempfile.mkdtemp(prefix="soak-")) / "jobs.log"
    env = dict(
        os.environ,
        DATABASE_URL=f"{PG}/{name}",
        DEBUG="False",
        SECRET_KEY="soak-only",
        ALLOWED_HOSTS="127.0.0.1",
        LOG_LEVEL="WARNING",
    )
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    port = free_port()
    manage = [sys.executable, "manage.py"]
    procs = {
        "broker": start(
            [str(VENV_BIN / "gunicorn"), "-b", f"127.0.0.1:{port}"], env, out / "gunicorn.log"
        )
    }
    procs["sweeper"] = start([*manage, "runsweeper"], env, out / "sweeper.log")
    broker_url = f"http://127.0.0.1:{port}"
    for i in (1, 2):
        procs[f"worker{i}"] = start(
            [*manage, "runworker", "--broker", broker_url, "--log-file", str(jobs_log)],
            env,
            out / f"worker{i}.log",
        )
    ok = False
    try:
        wait_healthy(port)
        print(
            f"soak: {args.minutes:g} min at {args.rate:g} tasks/s, 1 in 10 failing; "
            f"database {name}; gunicorn {broker_url}",
            flush=True,
        )
        stats_conn = Conn(port)
        producer = Producer(port, args.rate, args.minutes * 60)
        started = time.monotonic()
        producer.start()
        print(memory_line(0, procs, stats_conn.call("GET", "/stats")[1]), flush=True)
        samples: list[dict[str, float]] = []
        for minute in range(1, math.ceil(args.minutes) + 1):
            time.sleep(max(0.0, started + min(minute, args.minutes) * 60 - time.monotonic()))
            samples.append({k: rss_mb(p) for k, p in procs.items()})
            print(memory_line(minute, procs, stats_conn.call("GET", "/stats")[1]), flush=True)
        producer.join(60)
        ok = report(producer, stats_conn, procs, samples[0])
    finally:
        for proc in reversed(procs.values()):  # workers first: the broker then has no one parked
            stop(proc)
        if not args.keep_db:
            with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return 0 if ok else 1


def report(
    producer: Producer, conn: Conn, procs: dict[str, subprocess.Popen], first: dict[str, float]
) -> bool:
    """Drain, print the totals and the memory change; True when the totals balance."""
    end = time.monotonic() + 120
    while time.monotonic() < end:
        stats = conn.call("GET", "/stats")[1]
        if stats["ready"] + stats["handed_out"] + stats["delayed"] == 0:
            break
        time.sleep(1)
    t = stats["totals"]
    last = {k: rss_mb(p) for k, p in procs.items()}
    checks = {
        "drained (nothing ready, handed out or delayed)": stats["ready"]
        + stats["handed_out"]
        + stats["delayed"]
        == 0,
        "enqueued == tasks that got a 201": t["enqueued"] == producer.sent,
        "acked == tasks that did not ask to fail": t["acked"] == producer.sent - producer.failing,
        "dead == tasks that asked to fail": stats["dead"] == producer.failing,
        "nacked + reclaimed == retried + buried": t["nacked"] + t["reclaimed"]
        == t["retried"] + t["buried"],
        "delivered == acked + nacked + reclaimed": t["delivered"]
        == t["acked"] + t["nacked"] + t["reclaimed"],
    }
    print(
        f"producer: {producer.sent} accepted ({producer.failing} asking to fail), "
        f"answers {producer.statuses}, send errors {producer.errors}"
    )
    print("totals: " + ", ".join(f"{k} {v}" for k, v in t.items()))
    print(
        "memory (after minute 1 -> after draining, MiB): "
        + ", ".join(
            f"{k} {first[k]:.1f} -> {last[k]:.1f} ({last[k] - first[k]:+.1f})" for k in procs
        )
    )
    for what, held in checks.items():
        print(f"  [{'ok' if held else 'FAILED'}] {what}")
    return all(checks.values())


if __name__ == "__main__":
    sys.exit(main())

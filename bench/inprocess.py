"""Per-task CPU of the request path, in-process: the WSGI application called directly (no gunicorn,
no client, one thread), so a change's cost shows without the noise of a shared machine.

    python bench/inprocess.py [--profile] [--cycles N]

Creates and drops its own PostgreSQL database (BENCH_PG names the server). Prints CPU
(time.process_time) and wall time per task for
  single   POST /jobs, GET /jobs/next?wait_ms=0, POST /jobs/{id}/ack   (three requests a task)
  batch10  POST /jobs/claim {"max": 10}, POST /jobs/ack of those 10    (tasks from /jobs/batch)
  settle10 POST /jobs/claim {"max": 10, "acks": [the previous 10]}    (one request per 10)
--profile adds a cProfile of each, timed by CPU, not wall (PostgreSQL's own CPU is not here).
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
DB = f"bench_inprocess_{os.getpid()}"


def _setup() -> Callable[..., bytes]:
    sys.path.insert(0, str(ROOT))
    os.environ.update(
        DATABASE_URL=f"{PG}/{DB}",
        DJANGO_SETTINGS_MODULE="queueproject.settings",
        DEBUG="False",
        SECRET_KEY="bench-only",
        ALLOWED_HOSTS="127.0.0.1",
        LOG_LEVEL="WARNING",
    )
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from queueproject.wsgi import application

    def call(method: str, path: str, qs: str = "", body: bytes = b"") -> bytes:
        env = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": qs,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8080",
            "HTTP_HOST": "127.0.0.1",
            "wsgi.input": io.BytesIO(body),
            "CONTENT_LENGTH": str(len(body)),
            "CONTENT_TYPE": "application/json",
            "wsgi.url_scheme": "http",
            "SERVER_PROTOCOL": "HTTP/1.1",
        }
        status: list[str] = []
        result = application(env, lambda s, h, e=None: status.append(s))
        data = b"".join(result)
        result.close()
        if not status[0].startswith("2"):
            raise SystemExit(f"{method} {path}?{qs} answered {status[0]}: {data[:300]!r}")
        return data

    return call


def main() -> None:
    profile = "--profile" in sys.argv
    cycles = int(sys.argv[sys.argv.index("--cycles") + 1]) if "--cycles" in sys.argv else 2000
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {DB}")
    try:
        call = _setup()
        run(call, cycles, profile)
    finally:
        from django.db import connections

        from broker.wakeup import hub

        hub.stop()
        connections.close_all()
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")


def run(call: Callable[..., bytes], cycles: int, profile: bool) -> None:
    def single() -> None:
        call("POST", "/jobs", body=b'{"payload": {"line": "x"}}')
        got = json.loads(call("GET", "/jobs/next", "wait_ms=0"))
        call("POST", f"/jobs/{got['task']['id']}/ack", f"lease_id={got['lease_id']}")

    def fill(n: int) -> None:
        jobs = json.dumps({"jobs": [{"payload": {"line": str(i)}} for i in range(500)]}).encode()
        for _ in range(0, n, 500):
            call("POST", "/jobs/batch", body=jobs)

    def batch() -> None:
        got = json.loads(call("POST", "/jobs/claim", body=b'{"max": 10, "wait_ms": 0}'))
        acks = [{"id": d["task"]["id"], "lease_id": d["lease_id"]} for d in got["deliveries"]]
        call("POST", "/jobs/ack", body=json.dumps({"acks": acks}).encode())

    held: list[dict[str, str]] = []

    def settle() -> None:
        body = {"max": 10, "wait_ms": 0, "acks": held[:]}
        got = json.loads(call("POST", "/jobs/claim", body=json.dumps(body).encode()))
        held[:] = [{"id": d["task"]["id"], "lease_id": d["lease_id"]} for d in got["deliveries"]]

    measure("single", single, cycles, 1, profile)
    fill(cycles * 25 + 1000)
    measure("batch10", batch, cycles, 10, profile)
    measure("settle10", settle, cycles, 10, profile)


def measure(
    name: str, step: Callable[[], None], cycles: int, per_cycle: int, profile: bool
) -> None:
    for _ in range(max(50, cycles // 10)):
        step()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(cycles):
        step()
    n = cycles * per_cycle
    cpu_ms = 1000 * (time.process_time() - cpu) / n
    wall_ms = 1000 * (time.perf_counter() - wall) / n
    print(
        f"{name:9s} {cpu_ms:.3f} ms CPU per task, {wall_ms:.3f} ms wall per task ({n} tasks)",
        flush=True,
    )
    if profile:
        prof = cProfile.Profile(time.process_time)
        prof.enable()
        for _ in range(cycles // 2):
            step()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()

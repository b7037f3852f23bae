"""What a fair claim costs beside keys that have nothing to claim, in-process (the WSGI application
called directly: claim over GET /jobs/next, then ack), on a fresh PostgreSQL database.

    python bench/fair.py [--code CHECKOUT] [--cycles N]

Prints the claim+ack p50 and p90 (ms) of
  plain    a plain queue's backlog (the baseline)
  fair     a fair queue's one busy key alone (what the restricted path costs by itself)
  served   a fair queue's one busy key beside 10,000 keys served in the last ten minutes and
           idle since (their rows kept for SERVED_KEEP)
  parked   the same beside 20,000 keys never served whose one task waits out a 6-day delay
and, first, one claim of a fair queue of 10,000 keys x 3 tasks just inserted, before any
statistics (ANALYZE) were taken (bounded by a 60 s statement timeout).
The sweeper's key housekeeping runs five times before each measurement, as it would in 5 s,
then VACUUM of broker_keystate, as autovacuum would after so many updates.
--code runs another checkout's broker (for a before/after); bytecode is not written there.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
DB = f"bench_fair_{os.getpid()}"
KEYS_SERVED = 10_000
KEYS_PARKED = 20_000
BUSY = 5_000
_TASK = (
    "INSERT INTO broker_task (state, queue, priority, payload, attempts, max_attempts,"
    " available_at, created_at, updated_at, key)"
    ' SELECT %s, %s, 1, \'{"line": "x"}\', 0, 3, now() + %s::interval, now(), now(), {key}'
    " FROM generate_series(1, %s) g"
)


def _setup(root: Path) -> Callable[..., bytes]:
    sys.path.insert(0, str(root))
    os.environ.update(
        DATABASE_URL=f"{PG}/{DB}", DJANGO_SETTINGS_MODULE="queueproject.settings",
        DEBUG="False", SECRET_KEY="bench-only", ALLOWED_HOSTS="127.0.0.1", LOG_LEVEL="WARNING",
    )  # fmt: skip
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from queueproject.wsgi import application

    def call(method: str, path: str, qs: str = "", body: bytes = b"") -> bytes:
        env = {
            "REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": qs,
            "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8080", "HTTP_HOST": "127.0.0.1",
            "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body)),
            "CONTENT_TYPE": "application/json", "wsgi.url_scheme": "http",
            "SERVER_PROTOCOL": "HTTP/1.1",
        }  # fmt: skip
        status: list[str] = []
        result = application(env, lambda s, h, e=None: status.append(s))
        data = b"".join(result)
        result.close()
        if not status[0].startswith("2"):
            raise SystemExit(f"{method} {path}?{qs} answered {status[0]}: {data[:300]!r}")
        return data

    return call


def _tasks(conn: psycopg.Connection, queue: str, n: int, key: str, state: str = "ready",
           delay: str = "0 s") -> None:  # fmt: skip
    conn.execute(_TASK.replace("{key}", key), [state, queue, delay, n])  # type: ignore[arg-type]


def _keystate(conn: psycopg.Connection, queue: str, n: int, served: str) -> None:
    # `served`: an SQL expression of this script's, never input.
    statement = f"INSERT INTO broker_keystate (queue, key, served_at) SELECT %s, 'k' || g, {served} FROM generate_series(1, %s) g ON CONFLICT DO NOTHING"  # noqa: E501, S608
    conn.execute(statement, [queue, n])  # type: ignore[arg-type]


def _housekeeping() -> None:
    from broker.queue import keys

    for _ in range(5):  # five ticks of the sweeper: five seconds
        keys.prune()
        if hasattr(keys, "sleep"):
            keys.sleep()
    from django.db import connection

    with connection.cursor() as cursor:  # the rows' old index entries, as autovacuum clears them
        cursor.execute("VACUUM broker_keystate")
    if os.environ.get("BENCH_DEBUG"):
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT queue, asleep_until IS NULL, count(*) FROM broker_keystate"
                " GROUP BY 1, 2 ORDER BY 1, 2"
            )
            print(cursor.fetchall())


def _cycles(call: Callable[..., bytes], queue: str, n: int) -> tuple[float, float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        got = json.loads(call("GET", "/jobs/next", f"wait_ms=0&queue={queue}"))
        call("POST", f"/jobs/{got['task']['id']}/ack", f"lease_id={got['lease_id']}")
        times.append((time.perf_counter() - started) * 1000)
    cuts = statistics.quantiles(times, n=10)
    return statistics.median(times), cuts[8]


def run(call: Callable[..., bytes], cycles: int) -> None:
    with psycopg.connect(f"{PG}/{DB}", autocommit=True) as conn:
        # Before any statistics: 10,000 keys of 3 tasks each, just inserted.
        call("PATCH", "/queues/fresh", body=b'{"fair": true}')
        _tasks(conn, "fresh", 30_000, "'k' || (g %% 10000)")
        _keystate(conn, "fresh", 10_000, "'1970-01-01'::timestamptz")
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = '60s'")
        started = time.perf_counter()
        try:
            call("GET", "/jobs/next", "wait_ms=0&queue=fresh")
            took = f"{(time.perf_counter() - started) * 1000:.1f} ms"
        except SystemExit as failed:
            took = f"failed after {time.perf_counter() - started:.1f} s ({failed})"[:200]
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = 0")
        print(f"fresh  first claim, no statistics: {took}")

        for name in ("plain", "fair", "served", "parked"):
            if name != "plain":
                call("PATCH", f"/queues/{name}", body=b'{"fair": true}')
            _tasks(conn, name, BUSY, "NULL" if name == "plain" else "'busy'")
        # Served and idle: their last hand-out within the last ten minutes, no live task.
        _keystate(conn, "served", KEYS_SERVED, "now() - random() * interval '9 minutes'")
        # Parked: never served (a thousand years back), one task each due in six days.
        _tasks(conn, "parked", KEYS_PARKED, "'k' || g", "delayed", "6 days")
        _keystate(conn, "parked", KEYS_PARKED, "now() - interval '365000 days'")
        conn.execute("INSERT INTO broker_keystate (queue, key, served_at) VALUES ('fair', 'busy',"
                     " now()), ('served', 'busy', now()), ('parked', 'busy', now())")  # fmt: skip
        conn.execute("VACUUM ANALYZE")
    for name in ("plain", "fair", "served", "parked"):
        _housekeeping()
        _cycles(call, name, 20)  # warm
        p50, p90 = _cycles(call, name, cycles)
        print(f"{name:6} claim+ack p50 {p50:.2f} ms, p90 {p90:.2f} ms ({cycles} cycles)")


def main() -> None:
    argv = sys.argv[1:]
    here = Path(__file__).parent.parent
    code = Path(argv[argv.index("--code") + 1]) if "--code" in argv else here
    cycles = int(argv[argv.index("--cycles") + 1]) if "--cycles" in argv else 300
    sys.dont_write_bytecode = True
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {DB}")
    try:
        call = _setup(code.resolve())
        run(call, cycles)
    finally:
        from django.db import connections

        from broker.wakeup import hub

        hub.stop()
        connections.close_all()
        if not os.environ.get("BENCH_DEBUG"):
            with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")


if __name__ == "__main__":
    main()

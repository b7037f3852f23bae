"""python bench/manyqueues.py: what many queue names cost everyone else.

Names BENCH_QUEUES (default 20,000) queues, one task each, on a fresh PostgreSQL database, then
times the reads that see every queue (`/stats`, `/metrics`, `/stats/history` with and without
`?queue=`, the dashboard's data and page, `GET /queues`, `GET /queues/{name}`, admin's queue
list) and measures the sweeper's CPU (its own and its database backends') while nothing moves:
first with one queue, then with every task still ready, then after every task was claimed and
acked; last, empty claims beside a settings row per queue (which admin's queue list makes).
Prints one line per reading (median and worst of BENCH_READS calls, answer size). Not a test.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import psycopg
import requests
from harness import ROOT, VENV_BIN, Conn, broker_database, free_port, start, stop, wait_healthy

QUEUES = int(os.environ.get("BENCH_QUEUES", "20000"))
READS = int(os.environ.get("BENCH_READS", "5"))
IDLE_S = float(os.environ.get("BENCH_IDLE_S", "15"))
READ_TIMEOUT_S = 120
BATCH = 1000
PASSWORD = "bench-only-password"  # noqa: S105 - a throwaway superuser of a throwaway database


def name_queues(port: int) -> float:
    """One task in each of QUEUES new queues, by batches; seconds taken."""
    c = Conn(port)
    t0 = time.perf_counter()
    for first in range(0, QUEUES, BATCH):
        last = min(QUEUES, first + BATCH)
        jobs = [{"payload": i, "queue": f"q{i:05d}"} for i in range(first, last)]
        status, _ = c.call("POST", "/jobs/batch", {"jobs": jobs})
        assert status == 201, status
    return time.perf_counter() - t0


def claim_and_ack_all(port: int) -> None:
    c = Conn(port)
    while True:
        status, body = c.call("POST", "/jobs/claim", {"max": 100, "wait_ms": 0})
        if status == 204:
            return
        acks = [{"id": d["task"]["id"], "lease_id": d["lease_id"]} for d in body["deliveries"]]
        status, _ = c.call("POST", "/jobs/ack", {"acks": acks})
        assert status == 200, status


def staff_session(base: str) -> requests.Session:
    s = requests.Session()
    page = s.get(f"{base}/admin/login/", timeout=30).text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token, "no CSRF token on the login page"
    answer = s.post(
        f"{base}/admin/login/?next=/admin/",
        data={"username": "bench", "password": PASSWORD, "csrfmiddlewaretoken": token[1]},
        timeout=30,
    )
    assert "sessionid" in s.cookies, answer.status_code
    return s


def time_reads(base: str, session: requests.Session, label: str) -> None:
    paths = [
        "/stats",
        "/metrics",
        "/stats/history",
        "/stats/history?queue=q00007",
        "/stats/history?step=3600&since=2000-01-01T00:00:00Z",
        "/queues",
        "/queues?limit=500",
        "/queues/q00007",
        "/dashboard/data.json",
        "/dashboard/",
        "/admin/broker/queue/",
    ]
    print(f"-- {label}")
    for path in paths:
        took, size, status = [], 0, 0
        for _ in range(READS):
            t0 = time.perf_counter()
            try:
                answer = session.get(base + path, timeout=READ_TIMEOUT_S)
            except requests.Timeout:
                print(f"   {path:55s} no answer within {READ_TIMEOUT_S} s")
                break
            took.append((time.perf_counter() - t0) * 1000)
            size, status = len(answer.content), answer.status_code
        if not took:
            continue
        print(
            f"   {path:55s} {status}  median {statistics.median(took):8.1f} ms"
            f"  max {max(took):8.1f} ms  {size / 1024:9.1f} KiB"
        )


def time_claims(port: int, label: str, n: int = 50) -> None:
    """Empty claims (wait_ms=0): each asks whether a restricted queue is in its scope."""
    c = Conn(port)
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        status, _ = c.call("GET", "/jobs/next?wait_ms=0")
        took.append((time.perf_counter() - t0) * 1000)
        assert status == 204, status
    print(f"-- {label}: empty claim median {statistics.median(took):.2f} ms, max {max(took):.2f}")


def counter_rows_left(dsn: str, within_s: float) -> int:
    """Wait (up to `within_s`) for the sweeper to retire the counter rows of the emptied queues;
    how many rows are left."""
    end = time.monotonic() + within_s
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            (rows,) = conn.execute("SELECT count(*) FROM broker_queuecounter").fetchone()
            if rows <= 100 or time.monotonic() > end:
                return int(rows)
            time.sleep(1)


def backends(dsn: str) -> list[psutil.Process]:
    """The database's server processes (the sweeper's among them)."""
    name = dsn.rsplit("/", 1)[1]
    with psycopg.connect(dsn, autocommit=True) as conn:
        pids = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        ).fetchall()
    found = []
    for (pid,) in pids:
        try:
            found.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    return found


def cpu_s(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def sweeper_idle(dsn: str, sweeper: subprocess.Popen, label: str) -> None:
    """The sweeper's CPU while nothing moves: its process, and all of the database's backends
    (the web processes' are idle meanwhile), in % of one core."""
    own = [psutil.Process(sweeper.pid)]
    server = backends(dsn)
    a, b, t0 = cpu_s(own), cpu_s(server), time.monotonic()
    time.sleep(IDLE_S)
    a2, b2, t1 = cpu_s(own), cpu_s(server), time.monotonic()
    span = t1 - t0
    print(
        f"-- {label}: sweeper idle {100 * (a2 - a) / span:5.1f} % of a core,"
        f" database backends {100 * (b2 - b) / span:5.1f} %"
    )


def main() -> None:
    out = ROOT / "bench-out"
    out.mkdir(exist_ok=True)
    with broker_database("manyqueues") as (dsn, env):
        env = {**env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD}
        subprocess.run(
            [sys.executable, "manage.py", "createsuperuser", "--noinput", "--username", "bench",
             "--email", "bench@example.com"],
            cwd=ROOT, env=env, check=True,
        )  # fmt: skip
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        gunicorn = [str(VENV_BIN / "gunicorn"), "-b", f"127.0.0.1:{port}"]
        web = start(gunicorn, env, out / "mq-web.log")
        sweeper = start([sys.executable, "manage.py", "runsweeper"], env, out / "mq-sweeper.log")
        try:
            wait_healthy(port)
            session = staff_session(base)
            Conn(port).call("POST", "/jobs", {"payload": 1})
            claim_and_ack_all(port)
            time.sleep(3)
            sweeper_idle(dsn, sweeper, "one queue")
            time_claims(port, "one queue")
            took = name_queues(port)
            print(f"-- named {QUEUES} queues in {took:.2f} s")
            time.sleep(3)
            time_reads(base, session, f"{QUEUES} queues, one ready task each")
            sweeper_idle(dsn, sweeper, f"{QUEUES} queues with a ready task")
            t0 = time.perf_counter()
            claim_and_ack_all(port)
            print(f"-- claimed and acked them all in {time.perf_counter() - t0:.2f} s")
            t0 = time.perf_counter()
            rows = counter_rows_left(dsn, 120)
            print(f"-- {rows} counter rows left {time.perf_counter() - t0:.1f} s later")
            time_reads(base, session, f"{QUEUES} queues, every task acked")
            sweeper_idle(dsn, sweeper, f"{QUEUES} queues, nothing live")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")  # the deleted rows gone, as autovacuum does later
                for table, live, dead in conn.execute(
                    "SELECT relname, n_live_tup, n_dead_tup FROM pg_stat_user_tables"
                    " WHERE relname IN ('broker_queuecounter', 'broker_historymark')"
                ):
                    print(f"-- after VACUUM: {table} {live} rows, {dead} dead")
            time_reads(base, session, f"{QUEUES} queues, every task acked, after VACUUM")
            sweeper_idle(dsn, sweeper, f"{QUEUES} queues, nothing live, after VACUUM")
            time_claims(port, f"{QUEUES} queues, each with a settings row (admin's list made them)")
        finally:
            stop(sweeper)
            stop(web)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()

"""PostgreSQL restarted under load: 503 JSON while it is away, recovery by itself, nothing lost.

Restarting PostgreSQL disturbs everything else using it on this machine, so this test is `slow`
(RUN_SLOW=1, which .ci/run sets), keeps the outage to a few seconds, and always starts the
cluster again, whatever happens.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from http.client import HTTPException
from pathlib import Path
from typing import Any, TypeVar

import pytest
from django.db import DatabaseError, connection

from broker.states import State
from tests.faults.harness import Broker, Producers, audit, settled, workers
from tests.procs import Proc, http, running, sweeper, wait_until

# serial: it stops and starts the PostgreSQL server every other test uses
pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow, pytest.mark.serial]
log = logging.getLogger(__name__)
T = TypeVar("T")
OUTAGE_S = 3.0


def _cluster() -> list[str]:
    version = sorted(p.name for p in Path("/etc/postgresql").iterdir())[-1]
    return ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main"]


def _pg_ready() -> bool:
    ready = subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"], check=False)
    return ready.returncode == 0


@contextmanager
def postgres_restored() -> Iterator[None]:
    """Whatever the test does, PostgreSQL is running again afterwards."""
    try:
        yield
    finally:
        if not _pg_ready():
            subprocess.run([*_cluster(), "start"], check=False, timeout=60)
        wait_until(_pg_ready, 60, 0.2, "PostgreSQL to be back")


def _restart_postgres() -> tuple[float, float]:
    """Stop PostgreSQL, wait OUTAGE_S, start it; (stopped at, answering at) on monotonic time."""
    subprocess.run([*_cluster(), "stop", "-m", "fast"], check=True, timeout=60)
    stopped = time.monotonic()
    time.sleep(OUTAGE_S)
    subprocess.run([*_cluster(), "start"], check=True, timeout=60)
    wait_until(_pg_ready, 60, 0.1, "PostgreSQL to answer")
    return stopped, time.monotonic()


def _with_fresh_connection(query: Callable[[], T], timeout: float = 30) -> T:
    """Run query on this process's connection, replacing connections PostgreSQL's restart broke."""
    end = time.monotonic() + timeout
    while True:
        try:
            return query()
        except DatabaseError:
            connection.close()
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


class Prober:
    """Calls the API every 50 ms and keeps (time, path, status, JSON body or raw text)."""

    PATHS = ("/stats", "/jobs?limit=1", "/jobs/next?wait_ms=0", "/healthz")

    def __init__(self, base: str) -> None:
        self.base = base
        self.seen: list[tuple[float, str, int, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(0.05):
            path = self.PATHS[n % len(self.PATHS)]
            n += 1
            try:
                with urllib.request.urlopen(f"{self.base}{path}", timeout=20) as resp:  # noqa: S310
                    status, raw, ctype = resp.status, resp.read(), resp.headers["Content-Type"]
            except urllib.error.HTTPError as err:
                status, raw, ctype = err.code, err.read(), err.headers["Content-Type"]
            except (OSError, HTTPException):
                continue
            body: Any = raw.decode(errors="replace")
            if raw and (ctype or "").startswith("application/json"):
                body = json.loads(raw)
            self.seen.append((time.monotonic(), path, status, body))
            # A claim that got a task must give it back, or it would wait out its lease.
            if path.startswith("/jobs/next") and status == 200:
                task, lease = body["task"]["id"], body["lease_id"]
                try:
                    http("POST", f"{self.base}/jobs/{task}/ack?lease_id={lease}", timeout=20)
                except (OSError, HTTPException):
                    pass  # the lease expires and the task is redelivered: allowed

    def recovered(self, after: float, run: int = 20) -> bool:
        """The last `run` answers since `after` were all successes."""
        statuses = [status for at, _, status, _ in self.seen if at > after][-run:]
        return len(statuses) == run and all(status < 500 for status in statuses)

    def failures(self) -> list[tuple[float, str, int, Any]]:
        return [s for s in self.seen if s[2] >= 500]


def _answers(base: str, n: int) -> list[tuple[str, int, Any]]:
    """n reads spread over the broker's processes: (path, status, body)."""
    paths = ("/stats", "/jobs?limit=1", "/healthz", "/dlq")
    return [(p, *http("GET", f"{base}{p}", timeout=20)) for p in (paths * n)[:n]]


def test_postgres_restart_under_load__503_json_then_recovers__nothing_lost(
    db_url: str, tmp_path: Path, log_file: Path
) -> None:
    # A request waits up to BROKER_DB_POOL_TIMEOUT for a connection before it answers 503; one
    # second, so that the outage outlasts it and its answers can be seen.
    busy = Broker(db_url, tmp_path, name="busy", BROKER_DB_POOL_TIMEOUT="1")
    # A second broker, idle through the outage: its pooled connections are all stale after it.
    idle = Broker(db_url, tmp_path, name="idle")
    with ExitStack() as stack:
        for broker in (busy, idle):
            broker.start()
            stack.callback(broker.stop)
        assert {s for _, s, _ in _answers(idle.base, 40)} == {200}  # connections pooled
        sweep = stack.enter_context(running(sweeper(db_url, tmp_path)))
        pool: list[Proc] = workers(
            busy.base, db_url, tmp_path, log_file, 3, "--concurrency", "1", "--lease-ms", "5000"
        )
        stack.callback(lambda: [proc.stop() for proc in pool])
        producers = Producers(
            busy.base, threads=20, per_thread=40, pause_s=0.25, body={"max_attempts": 5}
        ).start()
        prober = stack.enter_context(Prober(busy.base))
        wait_until(lambda: len(producers.accepted) >= 150, 30, what="150 accepted tasks")

        with postgres_restored():
            stopped, back = _restart_postgres()
        stale = _answers(idle.base, 40)
        wait_until(lambda: prober.recovered(after=back), 30, 0.2, "20 good answers in a row")
        producers.join(120)
        assert len(producers.accepted) == producers.wanted
        wait_until(lambda: _with_fresh_connection(settled), 90, 0.5, "every task to settle")
        assert sweep.popen.poll() is None, "the sweeper died"
        assert all(proc.popen.poll() is None for proc in pool), "a worker died"
        worker_logs = "".join(proc.output() for proc in pool)

    # While PostgreSQL was away: 503 with a JSON error, never a 500 or a page.
    failures = prober.failures()
    for _, path, status, body in failures:
        assert status == 503, (path, status, body)
        assert isinstance(body, dict) and body.get("error"), (path, body)
    assert set(producers.statuses) <= {200, 201, 503}, producers.statuses
    assert failures, "the prober never saw the outage"
    # Workers backed off and retried, and resumed: nothing lost, nothing stuck.
    assert "answered 503" in worker_logs or "unreachable" in worker_logs
    tasks = _with_fresh_connection(lambda: audit(producers.accepted, log_file))
    assert {state for state, _, _ in tasks.values()} == {State.DONE}
    # Stale connections are dropped, not handed to requests: the first calls after the outage
    # to a broker that was idle through it all succeed.
    assert [a for a in stale if a[1] != 200] == []
    last_failure = max((at for at, *_ in failures), default=stopped)
    log.info(
        "outage %.1f s; last probe 5xx %.1f s after PostgreSQL answered; probe answers %s; "
        "producer answers %s; 503s seen by workers %d; %d redelivered after lease expiry",
        back - stopped,
        last_failure - back,
        Counter((s[1], s[2]) for s in prober.seen),
        dict(producers.statuses),
        worker_logs.count("answered 503"),
        sum(1 for *_, e in tasks.values() if e),
    )

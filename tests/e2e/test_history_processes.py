"""History with real processes on PostgreSQL: two broker nodes, three sweepers recording at once,
workers acking and failing, leases lapsing. Every count is recorded once: the points add up to the
lifetime totals exactly, by minute and by hour."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.procs import gunicorn, http, manage, running, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(180)]

COUNTS = ("enqueued", "acked", "nacked", "reclaimed", "buried")
FAST_RETRIES = {"BROKER_RETRY_BASE_MS": "20", "BROKER_RETRY_MAX_MS": "50"}


def _summed(points: list[dict]) -> dict[str, int]:
    return {name: sum(p[name] for p in points) for name in COUNTS}


def _history(base: str, step: int, since: datetime) -> list[dict]:
    status, body = http("GET", f"{base}/stats/history?step={step}&since={quote(since.isoformat())}")
    assert status == 200, body
    return body["points"]


def test_history__two_nodes_three_sweepers__points_add_up_to_the_totals_exactly(
    db_url: str, tmp_path: Path
) -> None:
    from broker.history.sql import ALL_QUEUES
    from broker.models import HistoryPoint

    started = datetime.now(UTC) - timedelta(minutes=1)
    stop = threading.Event()
    with ExitStack() as stack:
        a, b = (
            stack.enter_context(gunicorn(db_url, tmp_path, name, WORKERS="1", **FAST_RETRIES))
            for name in ("a", "b")
        )
        for n in range(3):
            args = ["runsweeper", "--interval-ms", "20"]
            stack.enter_context(
                running(manage(args, db_url, tmp_path, f"sweeper{n}", **FAST_RETRIES))
            )
        for n, base in enumerate((a, b)):
            args = ["runworker", "--broker", base, "--log-file", str(tmp_path / "jobs.log"),
                    "--concurrency", "2", "--wait-ms", "1000"]  # fmt: skip
            stack.enter_context(running(manage(args, db_url, tmp_path, f"worker{n}")))

        def produce(base: str) -> None:
            i = 0
            while not stop.is_set():
                jobs = [{"payload": {"i": i, "fail": i % 5 == 0}, "max_attempts": 2}
                        for i in range(i, i + 20)]  # fmt: skip
                i += 20
                assert http("POST", f"{base}/jobs/batch", {"jobs": jobs})[0] == 201
                time.sleep(0.05)

        def drop_leases(base: str) -> None:
            # Claims whose holder vanishes: each lease lapses and a sweeper reclaims the task.
            while not stop.is_set():
                http("GET", f"{base}/jobs/next?wait_ms=200&lease_ms=50")
                time.sleep(0.1)

        threads = [threading.Thread(target=produce, args=(base,)) for base in (a, b)]
        threads += [threading.Thread(target=drop_leases, args=(base,)) for base in (a, b)]
        for thread in threads:
            thread.start()
        time.sleep(5)
        stop.set()
        for thread in threads:
            thread.join(30)

        def settled() -> bool:
            now = http("GET", f"{a}/stats")[1]
            return now["ready"] + now["handed_out"] + now["delayed"] == 0

        wait_until(settled, 60, 0.2, "every task done or dead")
        time.sleep(1.5)  # the sweepers' next recordings
        totals = {k: http("GET", f"{a}/stats")[1]["totals"][k] for k in COUNTS}
        for base in (a, b):
            for step in (60, 3600):
                assert _summed(_history(base, step, started)) == totals, (base, step)
    # Every sweeper stopped: what is stored is what they recorded, each count once, in the
    # queues' own series and in all queues'.
    stored = HistoryPoint.objects.filter(step=60).exclude(queue=ALL_QUEUES)
    every = HistoryPoint.objects.filter(step=60, queue=ALL_QUEUES)
    assert {k: sum(getattr(p, k) for p in stored) for k in COUNTS} == totals
    assert {k: sum(getattr(p, k) for p in every) for k in COUNTS} == totals
    assert totals["reclaimed"] > 0 and totals["buried"] > 0 and totals["acked"] > 100, totals
    assert stored.count() >= 1

"""Two gunicorn workers on PostgreSQL: every scrape agrees, whichever process answers."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.procs import gunicorn, http

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def _scrape(base: str) -> dict[tuple[str, tuple], float]:
    # A new connection each time, so the kernel hands it to either worker.
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:  # noqa: S310
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics__two_workers__twenty_scrapes_identical_and_equal_to_stats(
    db_url: str, tmp_path: Path
) -> None:
    with gunicorn(db_url, tmp_path, WORKERS="2") as base:
        for n in range(6):
            assert http("POST", f"{base}/jobs", {"payload": n, "queue": f"q{n % 2}"})[0] == 201
        for _ in range(4):
            status, got = http("GET", f"{base}/jobs/next?wait_ms=0")
            assert status == 200
            task, lease = got["task"]["id"], got["lease_id"]
            verb = "ack" if int(task) % 2 else "nack"
            assert http("POST", f"{base}/jobs/{task}/{verb}?lease_id={lease}")[0] == 204

        scrapes = [_scrape(base) for _ in range(20)]
        stats = http("GET", f"{base}/stats")[1]

    assert all(s == scrapes[0] for s in scrapes)
    first = scrapes[0]
    assert first[("jobs_enqueued_total", ())] == stats["totals"]["enqueued"] == 6
    assert first[("jobs_completed_total", ())] == stats["totals"]["acked"]
    assert first[("jobs_failed_total", ())] == stats["totals"]["nacked"]
    assert first[("job_processing_duration_seconds_count", ())] == 4
    pending = sum(v for (name, _), v in first.items() if name == "queue_pending_jobs")
    assert pending == stats["ready"] == 2

"""Batch mode end to end: produce --batch, runworker --batch, real processes on PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.procs import gunicorn, http, manage, running, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def _stats(base: str) -> dict:
    return http("GET", f"{base}/stats")[1]


def test_batch__produce_300_by_50_worker_by_10__300_whole_lines_each_once(
    db_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "jobs.log"
    with gunicorn(db_url, tmp_path) as base:
        producing = manage(
            ["produce", "--broker", base, "-n", "300", "--batch", "50"], db_url, tmp_path, "produce"
        )
        assert producing.wait(60) == 0, producing.output()
        assert "sent 300, rejected 0" in producing.output()
        producing.stop()
        worker = manage(
            [
                "runworker",
                "--broker",
                base,
                "--log-file",
                str(log),
                "--wait-ms",
                "2000",
                "--batch",
                "10",
                "--concurrency",
                "3",
            ],
            db_url,
            tmp_path,
            "worker",
            LOG_LEVEL="INFO",
        )
        with running(worker):
            wait_until(lambda: _stats(base)["totals"]["acked"] == 300, 60, what="300 acks")
        stats = _stats(base)

    said = worker.log_path.read_text()
    assert worker.popen.returncode == 0, said  # SIGTERM: settled, then exit 0
    assert "batch 10" in said
    assert "ack refused" not in said

    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 300
    assert len({line["id"] for line in lines}) == 300
    wanted = sorted(f"hello {n}" for n in range(1, 301))
    assert sorted(line["payload"]["line"] for line in lines) == wanted
    assert stats["totals"]["acked"] == 300
    assert all(stats[k] == 0 for k in ("ready", "handed_out", "delayed", "dead"))

"""A long task killed mid-way resumes from its checkpoint: real gunicorn, sweeper and runworker
processes; the first worker is killed with SIGKILL while the task reports progress."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.procs import gunicorn, http, manage, running, sweeping, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(120)]

ROWS = 80


def _worker(base: str, db_url: str, tmp_path: Path, name: str):
    args = ["runworker", "--broker", base, "--lease-ms", "1500", "--concurrency", "1",
            "--wait-ms", "1000", "--log-file", str(tmp_path / "jobs.log")]  # fmt: skip
    return manage(args, db_url, tmp_path, name, LOG_LEVEL="INFO")


def test_resume__worker_killed_mid_way__the_retry_starts_at_the_checkpoint(
    db_url: str, tmp_path: Path
) -> None:
    with (
        gunicorn(db_url, tmp_path, WORKERS="1") as base,
        sweeping(db_url, tmp_path, 100),
    ):
        job = {"type": "batch_import", "max_attempts": 3,
               "payload": {"rows": ROWS, "row_ms": 50, "checkpoint_every": 5}}  # fmt: skip
        status, body = http("POST", f"{base}/jobs", job)
        assert status == 201, body
        task_url = f"{base}/jobs/{body['id']}"

        def reported(least: int):
            shown = http("GET", task_url)[1]
            row = (shown["checkpoint"] or {}).get("next_row", 0)
            return shown if row >= least else None

        with running(_worker(base, db_url, tmp_path, "first")) as first:
            before = wait_until(lambda: reported(20), 30, 0.05, "a checkpoint at row 20")
            first.kill_group(signal.SIGKILL)
            first.wait(10)
        killed_at = before["checkpoint"]["next_row"]
        assert before["state"] == "handed_out" and killed_at < ROWS
        progress = before["progress"]
        assert progress["message"].startswith("row ") and 0 < progress["fraction"] < 1

        with running(_worker(base, db_url, tmp_path, "second")):
            done = wait_until(
                lambda: (t := http("GET", task_url)[1])["state"] == "done" and t,
                40,
                0.1,
                "the retry to finish",
            )

    result = done["result"]
    assert result["attempt"] == 2
    # It resumed where the broker last heard from the killed worker, not from row 0.
    assert killed_at <= result["resumed_at_row"] < ROWS, (killed_at, result)
    assert [e["error"] for e in done["errors"]] == ["lease expired"]
    assert done["progress"]["fraction"] == 1
    assert done["progress"]["message"] == f"row {ROWS} of {ROWS}"
    assert done["checkpoint"] == {"next_row": ROWS}

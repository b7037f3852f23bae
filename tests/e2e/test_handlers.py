"""Handlers of your own end to end: a module written to a folder, `runworker --handlers` started
there against a real gunicorn broker, at the default log level (API.md "Your own code")."""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.procs import ROOT, Proc, child_env, gunicorn, http, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(120)]

MODULE = '''
from workers import handler

SCHEMA = {"type": "object", "required": ["width"],
          "properties": {"width": {"type": "integer", "minimum": 1}}}


@handler("resize_image", schema=SCHEMA)
def resize(payload, job):
    """Resize one image.

    Not part of the description.
    """
    job.progress(1.0, "resized")
    return {"width": payload["width"], "attempt": job.attempts}


@handler("explode")
def explode(payload):
    """Fails as a handler with a bug does."""
    sizes = {"height": 1}
    return sizes[payload["key"]]
'''


@pytest.fixture
def broker(db_url: str, tmp_path: Path) -> Iterator[str]:
    with gunicorn(db_url, tmp_path, WORKERS="1") as base:
        yield base


@pytest.fixture
def worker(broker: str, db_url: str, tmp_path: Path) -> Iterator[Proc]:
    """`manage.py runworker --handlers shop_jobs` run in the module's folder (not the checkout:
    manage.py puts only its own folder on the path), at the default log level."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "shop_jobs.py").write_text(textwrap.dedent(MODULE))
    args = [sys.executable, str(ROOT / "manage.py"), "runworker", "--handlers", "shop_jobs",
            "--broker", broker, "--wait-ms", "300",
            "--log-file", str(tmp_path / "jobs.log")]  # fmt: skip
    # child_env: LOG_LEVEL=WARNING, the bundled project's default.
    proc = Proc(args, child_env(db_url), tmp_path / "worker.log", cwd=folder)
    try:
        wait_until(lambda: "worker on " in proc.output(), 30, 0.1, "the worker's start line")
        yield proc
    finally:
        proc.stop()


def _enqueue(base: str, job_type: str, payload: Any, **fields: Any) -> str:
    status, body = http("POST", f"{base}/jobs", {"type": job_type, "payload": payload, **fields})
    assert status == 201, body
    return str(body["id"])


def _finished(base: str, task_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        task = http("GET", f"{base}/jobs/{task_id}")[1]
        return task if task["state"] in ("done", "dead") else None

    return wait_until(done, 30, 0.1, f"task {task_id} to finish")


def test_handlers__module_in_the_working_directory__registered_run_and_failures_told(
    broker: str, worker: Proc
) -> None:
    # The start line, at the default level: broker, queues, handlers, concurrency.
    start = next(line for line in worker.output().splitlines() if "worker on " in line)
    assert f"worker on {broker}: queues all, concurrency 3, " in start
    assert start.endswith("handlers explode (shop_jobs), resize_image (shop_jobs) and 10 "
                          "built-in types")  # fmt: skip

    # Registered at start: the schema, the docstring's first line.
    status, kind = http("GET", f"{broker}/types/resize_image")
    assert status == 200, kind
    assert (kind["builtin"], kind["description"]) == (False, "Resize one image.")
    assert kind["schema"]["required"] == ["width"]
    assert http("GET", f"{broker}/types/explode")[1]["schema"] is None
    status, refused = http("POST", f"{broker}/jobs", {"type": "resize_image", "payload": {}})
    assert status == 400
    assert refused["fields"] == {"payload.width": ["'width' is a required property"]}

    # Run: the return value is the ack's result.
    done = _finished(broker, _enqueue(broker, "resize_image", {"width": 200}))
    assert (done["state"], done["result"]) == ("done", {"width": 200, "attempt": 1})

    # A handler's exception: its type, message and traceback are stored; one line is logged.
    failed_id = _enqueue(broker, "explode", {"key": "width"}, max_attempts=1)
    failed = _finished(broker, failed_id)
    assert failed["state"] == "dead"
    error = failed["last_error"]
    assert error.startswith("KeyError: 'width'\nTraceback (most recent call last):\n")
    failing_line = r'shop_jobs\.py", line 22, in explode\n    return sizes\[payload\["key"\]\]'
    assert re.search(failing_line, error), error
    assert "workers/runner.py" not in error
    wait_until(lambda: f"task {failed_id} (explode) nacked in " in worker.output(), 10, 0.1,
               "the failure's line")  # fmt: skip
    line = next(x for x in worker.output().splitlines() if f"task {failed_id} (explode)" in x)
    assert " WARNING workers.runner " in line and line.endswith(" s: KeyError: 'width'")

    # A type this worker has no handler for: nacked naming the type.
    assert http("PUT", f"{broker}/types/someone_elses", {})[0] == 201
    other = _finished(broker, _enqueue(broker, "someone_elses", {}, max_attempts=1))
    assert (other["state"], other["last_error"]) == (
        "dead", "no handler for job type 'someone_elses' on this worker",
    )  # fmt: skip
    assert "Traceback" not in worker.output()  # every failure told in one line

"""The worker runs typed tasks with their type's handler, untyped ones to the log file,
and the broker keeps what came of it (result, or the error)."""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from broker import queue
from broker.queue import NewTask
from tests.conftest import post
from workers import handlers
from workers.client import Delivery
from workers.runner import Runner

pytestmark = pytest.mark.django_db


class InProcessBroker:
    """The workers' Broker protocol over the Django test client: the real API, no sockets."""

    def __init__(self, client: APIClient) -> None:
        self.client = client

    def claim(self, wait_ms: int, lease_ms: int, queues: Sequence[str] = ()) -> Delivery | None:
        params: dict[str, Any] = {"wait_ms": 0, "lease_ms": lease_ms}
        if queues:
            params["queue"] = ",".join(queues)
        r = self.client.get("/jobs/next", params)
        return None if r.status_code == 204 else r.json()

    def ack(self, task_id: str, lease_id: str, result: Any = None) -> bool:
        body = {"lease_id": lease_id, "result": result}
        return post(self.client, f"/jobs/{task_id}/ack", body).status_code == 204

    def nack(self, task_id: str, lease_id: str, error: str) -> bool:
        body = {"lease_id": lease_id, "error": error}
        return post(self.client, f"/jobs/{task_id}/nack", body).status_code == 204

    def extend(self, task_id: str, lease_id: str, lease_ms: int) -> bool:
        r = post(self.client, f"/jobs/{task_id}/extend?lease_id={lease_id}&lease_ms={lease_ms}")
        return r.status_code == 200

    def cancel_claims(self, *, hard: bool = True) -> None:
        pass


@pytest.fixture
def runner(api_client: APIClient, log_file: Path) -> Iterator[Runner]:
    r = Runner(
        InProcessBroker(api_client),
        resolve=handlers.Dispatch(str(log_file)),
        concurrency=1,
    )
    yield r
    r.close()


def run_one(runner: Runner) -> str:
    outcome = runner.tick()
    assert outcome is not None, "nothing was claimed"
    return outcome


@pytest.mark.parametrize(
    ("job_type", "payload", "result"),
    [
        ("data_transform", {"input": {"city ": " Paris "}}, {"CITY ": "Paris"}),
        ("sleep_job", {"duration_seconds": 0.01}, {"slept_seconds": 0.01}),
        (
            "image_resize",
            {"width": 4, "height": 2},
            {
                "source": {"width": 4, "height": 2},
                "resized": {"width": 2, "height": 1},
                # pixel (x, y) is 7x + 13y: the halves average (0+13+7+20)/4 and (14+21+27+34)/4
                "pixels_processed": 8,
                "checksum": zlib.crc32(bytes([10, 24])),
            },
        ),
    ],
)
def test_worker__typed_task__handler_result_is_kept(
    enqueue, runner, task, log_file: Path, job_type: str, payload: Any, result: Any
) -> None:
    pk = enqueue(type=job_type, payload=payload)
    assert run_one(runner) == "acked"
    shown = task(pk)
    assert (shown["state"], shown["result"], shown["errors"]) == ("done", result, [])
    assert not log_file.exists()  # typed tasks do not go to the log file


def test_worker__untyped_task__appended_to_the_log_file(enqueue, runner, task, log_file) -> None:
    pk = enqueue(payload={"line": "hello"})
    assert run_one(runner) == "acked"
    assert (task(pk)["state"], task(pk)["result"]) == ("done", None)
    assert [json.loads(line) for line in log_file.read_text().splitlines()] == [
        {"id": pk, "payload": {"line": "hello"}}
    ]


def test_worker__fail_job__nacked_until_dead_with_each_error(
    enqueue, runner, task, settings
) -> None:
    settings.BROKER_RETRY_BASE_MS = settings.BROKER_RETRY_MAX_MS = 0
    pk = enqueue(type="fail_job", payload={"message": "nope"}, max_attempts=2)
    assert run_one(runner) == "nacked"
    queue.promote_delayed()
    assert run_one(runner) == "nacked"
    shown = task(pk)
    assert shown["state"] == "dead"
    assert [(e["attempt"], e["error"]) for e in shown["errors"]] == [(1, "nope"), (2, "nope")]
    assert shown["last_error"] == "nope"


def test_worker__http_fetch__result_is_the_local_servers_status(
    enqueue, runner, task, settings
) -> None:
    settings.BROKER_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]  # loopback is refused by default

    class Teapot(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(418)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Teapot)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/brew"
        pk = enqueue(type="http_fetch", payload={"url": url, "timeout_seconds": 5})
        assert run_one(runner) == "acked"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert task(pk)["result"] == {"response_status": 418}


def test_worker__typed_payload_that_skipped_validation__nacked_naming_the_field(
    runner, task
) -> None:
    # Enqueued below the API (say, by an older broker): the worker validates again.
    pk, _ = queue.enqueue(
        NewTask(payload='{"duration_seconds": "soon"}', type="sleep_job", max_attempts=1)
    )
    assert run_one(runner) == "nacked"
    shown = task(str(pk))
    assert shown["state"] == "dead"
    assert shown["last_error"] == (
        "invalid sleep_job payload: duration_seconds: A valid number is required."
    )


def test_worker__type_unknown_to_this_worker__nacked(runner, task) -> None:
    pk, _ = queue.enqueue(NewTask(payload="{}", type="retired_type", max_attempts=1))
    assert run_one(runner) == "nacked"
    assert task(str(pk))["last_error"] == "no handler for job type 'retired_type' on this worker"

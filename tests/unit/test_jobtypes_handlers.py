"""Each sample type's handler does its work; the return value is the ack's result."""

from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.error
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from contract.jobtypes import InvalidPayloadError
from workers.handlers import REGISTRY
from workers.jobtypes.fail_job import JobFailedError


def run(name: str, payload: dict) -> object:
    return REGISTRY[name].run(payload)


# -- sleep_job ----------------------------------------------------------------------------------


def test_sleep_job__sleeps_the_duration_and_reports_it() -> None:
    started = time.monotonic()
    assert run("sleep_job", {"duration_seconds": 0.05}) == {"slept_seconds": 0.05}
    assert time.monotonic() - started >= 0.05


def test_sleep_job__default_is_3_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("workers.jobtypes.sleep_job.time.sleep", slept.append)
    assert run("sleep_job", {}) == {"slept_seconds": 3}
    assert slept == [3]


# -- order_payment: waits for an event ----------------------------------------------------------


def test_order_payment__first_delivery__suspends_for_its_payment() -> None:
    from workers.job import Job, Suspended

    job = Job.bare({"order": 42})
    with pytest.raises(Suspended) as suspended:
        REGISTRY["order_payment"].run(job.payload, job)
    body = suspended.value.body
    assert (body["event"], body["key"], body["checkpoint"]) == (
        "payment", "order-42", {"reserved": 42}
    )  # fmt: skip
    assert body["timeout_ms"] == 86_400_000


def test_order_payment__released_by_its_payment__finishes_with_its_data() -> None:
    from workers.job import Job

    delivery = {
        "task": {"id": "7", "payload": {"order": 42}, "attempts": 1, "checkpoint": {"reserved": 42},
                 "event": {"id": "3", "name": "payment", "key": "order-42",
                           "data": {"amount": 4200}, "at": "2026-12-06T18:00:00.000Z"}},
        "lease_id": "l",
    }  # fmt: skip
    job = Job(delivery)
    result = REGISTRY["order_payment"].run(job.payload, job)
    assert result == {"order": 42, "paid": 4200, "resumed_with": {"reserved": 42}}


# -- batch_import: resumable -------------------------------------------------------------------


def test_batch_import__first_attempt__all_rows_checkpoints_and_progress() -> None:
    from workers.job import Job

    job = Job.bare({"rows": 25, "row_ms": 0, "checkpoint_every": 10})
    result = REGISTRY["batch_import"].run(job.payload, job)
    assert result == {"rows": 25, "resumed_at_row": 0, "attempt": 1}
    assert job.checkpoint == {"next_row": 25}
    assert job.last_report == {
        "checkpoint": {"next_row": 25}, "fraction": 1.0, "message": "row 25 of 25",
    }  # fmt: skip


def test_batch_import__delivered_with_a_checkpoint__resumes_there(monkeypatch) -> None:
    from workers.job import Job

    slept: list[float] = []
    monkeypatch.setattr("workers.jobtypes.batch_import.time.sleep", slept.append)
    job = Job.bare({"rows": 100, "row_ms": 5}, checkpoint={"next_row": 90})
    result = REGISTRY["batch_import"].run(job.payload, job)
    assert result["resumed_at_row"] == 90
    assert slept == [0.005] * 10  # only the ten rows left


def test_batch_import__called_without_a_job__runs_from_the_start() -> None:
    assert run("batch_import", {"rows": 3, "row_ms": 0}) == {
        "rows": 3, "resumed_at_row": 0, "attempt": 1,
    }  # fmt: skip


# -- http_fetch: a local server only ------------------------------------------------------------


class Answers(BaseHTTPRequestHandler):
    """GET /status/N answers N; /redirect/<url> redirects there; /slow outwaits any timeout."""

    release = threading.Event()
    seen_agents: list[str] = []

    def do_GET(self) -> None:
        Answers.seen_agents.append(self.headers.get("User-Agent", ""))
        if self.path == "/slow":
            Answers.release.wait(10)
            code = 200
        elif self.path.startswith("/redirect/"):
            self.send_response(302)
            self.send_header("Location", self.path.removeprefix("/redirect/"))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        else:
            code = int(self.path.rsplit("/", 1)[-1])
        body = b"x" * 10
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def loopback_allowed(settings: Any) -> None:
    """The fetch policy refuses loopback: let the local test servers through."""
    settings.BROKER_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]


@pytest.fixture
def local_server(loopback_allowed: None) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    server.daemon_threads = True
    Answers.release.clear()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    Answers.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.mark.parametrize("status", [200, 204, 404, 500])
def test_http_fetch__any_answer__result_is_its_status(local_server: str, status: int) -> None:
    assert run("http_fetch", {"url": f"{local_server}/status/{status}"}) == {
        "response_status": status
    }


def test_http_fetch__sends_its_user_agent(local_server: str) -> None:
    Answers.seen_agents.clear()
    run("http_fetch", {"url": f"{local_server}/status/200"})
    assert Answers.seen_agents == ["queue-broker-worker/1 (http_fetch)"]


def test_http_fetch__redirect_to_http__followed(local_server: str) -> None:
    url = f"{local_server}/redirect/{local_server}/status/201"
    assert run("http_fetch", {"url": url}) == {"response_status": 201}


@pytest.mark.parametrize("target", ["ftp://127.0.0.1/x", "file:///etc/passwd"])
def test_http_fetch__redirect_elsewhere__not_followed_3xx_is_the_result(
    local_server: str, target: str
) -> None:
    assert run("http_fetch", {"url": f"{local_server}/redirect/{target}"}) == {
        "response_status": 302
    }


def test_http_fetch__no_answer_within_timeout__raises_soon(local_server: str) -> None:
    started = time.monotonic()
    with pytest.raises(OSError, match="timed out"):
        run("http_fetch", {"url": f"{local_server}/slow", "timeout_seconds": 0.3})
    assert time.monotonic() - started < 3


def test_http_fetch__nobody_listening__raises(loopback_allowed: None) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    with pytest.raises(urllib.error.URLError):
        run("http_fetch", {"url": f"http://127.0.0.1:{port}/", "timeout_seconds": 2})


def test_http_fetch__bad_scheme_reaching_the_worker__refused_before_any_request() -> None:
    with pytest.raises(InvalidPayloadError, match=r"invalid http_fetch payload: url: Must be"):
        run("http_fetch", {"url": "file:///etc/passwd"})


# -- data_transform -----------------------------------------------------------------------------


def test_data_transform__uppercases_keys_trims_strings_keeps_other_values() -> None:
    payload = {
        "input": {
            "name": "  Ada \n",
            "Born": 1815,
            "tags": [" a "],
            "x_y": {"k": " v "},
            "none": None,
            "é": "\tß ",
        }
    }
    assert run("data_transform", payload) == {
        "NAME": "Ada",
        "BORN": 1815,
        "TAGS": [" a "],
        "X_Y": {"k": " v "},
        "NONE": None,
        "É": "ß",
    }


def test_data_transform__empty_object__empty_result() -> None:
    assert run("data_transform", {"input": {}}) == {}


# -- image_resize -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("w", "h", "scale", "out"),
    [
        (64, 48, 0.5, (32, 24)),
        (3, 1, 0.5, (2, 1)),
        (1, 1, 0.01, (1, 1)),
        (10, 20, 1, (10, 20)),
    ],
)
def test_image_resize__reads_every_pixel_once(w: int, h: int, scale: float, out: tuple) -> None:
    result = run("image_resize", {"width": w, "height": h, "scale": scale})
    assert result["source"] == {"width": w, "height": h}
    assert (result["resized"]["width"], result["resized"]["height"]) == out
    assert result["pixels_processed"] == w * h


def test_image_resize__deterministic_and_size_dependent() -> None:
    a = run("image_resize", {"width": 40, "height": 30})
    assert run("image_resize", {"width": 40, "height": 30}) == a
    assert run("image_resize", {"width": 41, "height": 30})["checksum"] != a["checksum"]


def test_image_resize__default_scale_is_half() -> None:
    assert run("image_resize", {"width": 8, "height": 6})["resized"] == {"width": 4, "height": 3}


# -- send_email ---------------------------------------------------------------------------------


def test_send_email__takes_300ms_logs_and_sends_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="workers.jobtypes.send_email")
    started = time.monotonic()
    result = run("send_email", {"to": "ada@example.com", "subject": "Hi"})
    assert time.monotonic() - started >= 0.3
    assert result["sent_to"] == "ada@example.com"
    assert len(result["message_id"]) == 32
    [record] = caplog.records
    assert "ada@example.com" in record.getMessage()
    assert result["message_id"] in record.getMessage()


# -- fail_job -----------------------------------------------------------------------------------


def test_fail_job__always_raises() -> None:
    with pytest.raises(JobFailedError, match=r"^fail_job always fails$"):
        run("fail_job", {})
    with pytest.raises(JobFailedError, match=r"^disk on fire$"):
        run("fail_job", {"message": "disk on fire"})


# -- every type ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "sleep_job",
        "http_fetch",
        "data_transform",
        "image_resize",
        "send_email",
        "fail_job",
        "batch_import",
        "order_payment",
    ],
)
def test_handler__payload_not_an_object__invalid_payload_error(name: str) -> None:
    with pytest.raises(InvalidPayloadError, match=f"payload: The {name} payload must be"):
        REGISTRY[name].run(["not", "an", "object"])

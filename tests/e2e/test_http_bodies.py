"""Request bodies as real HTTP clients send them to gunicorn: chunked (no Content-Length), and cut
short by a client that hangs up mid-body."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from broker.models import Task
from tests.procs import gunicorn
from tests.procs import http as call

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def broker(live_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with gunicorn(live_db_url, tmp_path_factory.mktemp("bodies"), WORKERS="1") as base:
        yield base


def _chunked(base: str, path: str, body: bytes, **headers: str) -> tuple[int, dict]:
    """POST `body` with Transfer-Encoding: chunked, in pieces of 7 bytes."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        pieces = (body[i : i + 7] for i in range(0, len(body), 7))
        conn.request("POST", path, body=pieces, encode_chunked=True,
                     headers={"Content-Type": "application/json", **headers})  # fmt: skip
        response = conn.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else {}
    finally:
        conn.close()


def test_chunked_bodies__read_like_any_other(broker: str, db_url: str) -> None:
    status, created = _chunked(broker, "/jobs", b'{"payload": {"a": 1}, "queue": "chunks"}')
    assert status == 201, created
    assert call("GET", f"{broker}/jobs/{created['id']}")[1]["payload"] == {"a": 1}
    # A claim's body is its options: a queue with nothing in it hands out nothing.
    status, _ = _chunked(broker, "/jobs/claim", b'{"max": 3, "wait_ms": 0, "queues": ["none"]}')
    assert status == 204
    status, got = _chunked(broker, "/jobs/claim", b'{"wait_ms": 0, "queues": ["chunks"]}')
    assert status == 200, got
    (delivery,) = got["deliveries"]
    task_id, lease = delivery["task"]["id"], delivery["lease_id"]
    status, _ = _chunked(broker, f"/jobs/{task_id}/ack?lease_id={lease}", b'{"result": 42}')
    assert status == 204
    assert call("GET", f"{broker}/jobs/{task_id}")[1]["result"] == 42


def test_chunked_body_over_the_limit__413_nothing_enqueued(broker: str, db_url: str) -> None:
    body = json.dumps({"payload": "x" * 300_000}).encode()
    status, answer = _chunked(broker, "/jobs", body)
    assert status == 413, answer
    assert "error" in answer
    assert not Task.objects.exists()


def test_chunked_sqs_request__read(broker: str, db_url: str) -> None:
    status, answer = _chunked(broker, "/sqs", b'{"QueueName": "chunked-sqs"}',
                              **{"X-Amz-Target": "AmazonSQS.CreateQueue",
                                 "Content-Type": "application/x-amz-json-1.0"})  # fmt: skip
    assert status == 200, answer
    assert answer["QueueUrl"].endswith("/sqs/chunked-sqs")


@pytest.mark.parametrize("path", ["/jobs", "/jobs/batch", "/sqs"])
def test_body_cut_short__client_hangs_up__nothing_enqueued(
    broker: str, db_url: str, path: str
) -> None:
    body = {
        "/jobs": b'{"payload": {"cut": 1}}',
        "/jobs/batch": b'{"jobs": [{"payload": 1}, {"payload": 2}]}',
        "/sqs": b'{"QueueName": "cut-short"}',
    }[path]
    host, port = broker.removeprefix("http://").split(":")
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"X-Amz-Target: AmazonSQS.CreateQueue\r\nContent-Length: {len(body) + 100}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(head.encode() + body)
        s.shutdown(socket.SHUT_WR)  # the client is done sending: 100 bytes short
        answer = b"".join(iter(lambda: s.recv(65536), b""))
    assert (
        b" 201 " not in answer.split(b"\r\n", 1)[0] and b" 200 " not in answer.split(b"\r\n", 1)[0]
    )
    assert not Task.objects.exists()
    _, queues = call("GET", f"{broker}/queues")
    assert "cut-short" not in {q["name"] for q in queues["results"]}


def test_chunked_claim__parked_then_woken__its_body_still_read(broker: str, db_url: str) -> None:
    # A parked poll is served again when woken: its body, buffered from the chunks, with it.
    got: dict = {}
    thread = threading.Thread(target=lambda: got.update(answer=_chunked(
        broker, "/jobs/claim", b'{"wait_ms": 10000, "queues": ["parked-chunks"]}')))  # fmt: skip
    thread.start()
    time.sleep(1)  # parked by now
    call("POST", f"{broker}/jobs", {"payload": "elsewhere", "queue": "other-chunks"})
    _, created = call("POST", f"{broker}/jobs", {"payload": "mine", "queue": "parked-chunks"})
    thread.join(15)
    status, answer = got["answer"]
    assert status == 200, answer
    assert [d["task"]["id"] for d in answer["deliveries"]] == [created["id"]]


def test_body_over_the_limit__413_says_the_connection_closes(broker: str, db_url: str) -> None:
    """The refused body is left unread, so the connection cannot serve another request: the
    answer says `Connection: close` (it said keep-alive, and a client's next request on the
    connection failed), and a client that heeds it goes on over a new connection."""
    host, port = broker.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        body = json.dumps({"payload": "x" * 300_000})
        conn.request("POST", "/jobs", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert (response.status, response.getheader("Connection")) == (413, "close")
        assert "error" in json.loads(response.read())
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
    finally:
        conn.close()
    assert not Task.objects.exists()

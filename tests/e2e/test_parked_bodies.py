"""A parked claim keeps a few KiB, not its request body (API.md's Errors, "Bounded work"): SQS
receives of 3 MiB parked on a node grow its memory by KiB a poll, and a parked claim, served
again when woken, still answers as its body asked (gunicorn.conf.py's parking worker)."""

from __future__ import annotations

import http.client as httpclient
import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.procs import enqueue_batch, gunicorn, gunicorn_processes, http

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

POLLS = 30
BODY = 3 * 1_048_576 - 4096  # under the SQS endpoint's 3 MiB


@pytest.fixture
def node(db_url: str, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    with gunicorn(db_url, tmp_path, WORKERS="1") as base:
        _, (worker,) = gunicorn_processes(int(base.rsplit(":", 1)[1]), workers=1)
        yield base, worker


def _sqs_request(base: str, action: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    host = base.removeprefix("http://")
    head = (
        f"POST /sqs HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-amz-json-1.0\r\n"
        f"X-Amz-Target: AmazonSQS.{action}\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


def _sqs(base: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
    host, port = base.removeprefix("http://").split(":")
    conn = httpclient.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", "/sqs", json.dumps(body).encode(), {
            "Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}",
        })  # fmt: skip
        response = conn.getresponse()
        answer: dict[str, Any] = json.loads(response.read() or b"{}")
        assert response.status == 200, answer
        return answer
    finally:
        conn.close()


def _padded(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with an unknown parameter that takes it to BODY bytes (SQS ignores it)."""
    return {**body, "Pad": "p" * (BODY - len(json.dumps({**body, "Pad": ""})))}


def test_parked_sqs_receives_of_3_mib__node_grows_by_kib_a_poll(node: tuple[str, Any]) -> None:
    base, worker = node
    url = _sqs(base, "CreateQueue", {"QueueName": "parked-big"})["QueueUrl"]
    request = _sqs_request(
        base, "ReceiveMessage", _padded({"QueueUrl": url, "WaitTimeSeconds": 20})
    )
    host, port = base.removeprefix("http://").split(":")
    time.sleep(0.5)
    before = worker.memory_info().rss
    socks = []
    try:
        for _ in range(POLLS):
            s = socket.create_connection((host, int(port)))
            s.sendall(request)
            socks.append(s)
            time.sleep(0.1)  # one at a time: what stays is what a parked poll keeps
        time.sleep(1.0)
        grown = worker.memory_info().rss - before
    finally:
        for s in socks:
            s.close()

    # Each kept its 3 MiB body before (RSS +3.3 MiB a poll); now a few KiB (some 70 measured).
    assert grown / POLLS < 512 * 1024, f"{grown / POLLS / 1024:.0f} KiB a parked poll"


def test_parked_sqs_receive_of_3_mib__woken__answers_as_its_body_asked(
    node: tuple[str, Any],
) -> None:
    base, _ = node
    url = _sqs(base, "CreateQueue", {"QueueName": "parked-asked"})["QueueUrl"]
    asked = _padded({
        "QueueUrl": url, "WaitTimeSeconds": 20, "MaxNumberOfMessages": 2,
        "VisibilityTimeout": 7, "AttributeNames": ["ApproximateReceiveCount"],
        "MessageAttributeNames": ["colour"],
    })  # fmt: skip
    out: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: out.update(answer=_sqs(base, "ReceiveMessage", asked)))
    waiter.start()
    time.sleep(1.0)  # parked
    entries = [
        {"Id": str(i), "MessageBody": f"m{i}",
         "MessageAttributes": {"colour": {"DataType": "String", "StringValue": "red"},
                               "size": {"DataType": "Number", "StringValue": "1"}}}
        for i in range(3)
    ]  # fmt: skip
    _sqs(base, "SendMessageBatch", {"QueueUrl": url, "Entries": entries})
    waiter.join(30)

    messages = out["answer"]["Messages"]
    assert [m["Body"] for m in messages] == ["m0", "m1"]
    assert all(m["Attributes"] == {"ApproximateReceiveCount": "1"} for m in messages)
    assert all(list(m["MessageAttributes"]) == ["colour"] for m in messages)
    status, task = http("GET", f"{base}/jobs/{messages[0]['MessageId']}")
    assert status == 200 and task["worker"] == "sqs"
    deadline = datetime.fromisoformat(task["lease_deadline"].replace("Z", "+00:00"))
    assert 5 < (deadline - datetime.now(UTC)).total_seconds() <= 7  # its VisibilityTimeout


def test_parked_claim_of_many__woken__claims_as_its_body_asked(node: tuple[str, Any]) -> None:
    base, _ = node
    body = {"queues": ["parked-many"], "max": 2, "lease_ms": 7000, "wait_ms": 20000}
    out: dict[str, Any] = {}
    waiter = threading.Thread(
        target=lambda: out.update(answer=http("POST", f"{base}/jobs/claim", body, timeout=30))
    )
    waiter.start()
    time.sleep(1.0)  # parked
    made = enqueue_batch(base, [{"queue": "parked-many", "payload": i} for i in range(3)])
    waiter.join(30)

    status, answer = out["answer"]
    assert status == 200, answer
    assert [d["task"]["id"] for d in answer["deliveries"]] == made[:2]
    status, task = http("GET", f"{base}/jobs/{made[0]}")
    assert task["state"] == "handed_out"

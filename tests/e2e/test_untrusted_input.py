"""Requests of adversarial shape against a real gunicorn with the API's tokens on: each is refused
at once, and the node keeps answering others meanwhile (API.md, Errors, "Bounded work")."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.procs import gunicorn
from tests.procs import http as call

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# Far above what either request costs now (milliseconds), far below what the quadratic parse of
# the signature header cost (9 s for one, /healthz held 8 s by two).
ANSWERED_WITHIN_S = 3.0
LINES, LINE_BYTES = 20, 8_000


@pytest.fixture(scope="module")
def broker(live_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {"BROKER_API_TOKENS": "tok", "BROKER_SQS_CREDENTIALS": "AKID:secret"}
    with gunicorn(live_db_url, tmp_path_factory.mktemp("untrusted"), **env) as base:
        yield base


def _long_signature_request(base: str, pad: str) -> tuple[bytes, float]:
    """POST /sqs with LINES Authorization lines, each a SigV4 header of LINE_BYTES padded with
    `pad`; the status line of the answer, and how long it took."""
    host, port = base.removeprefix("http://").split(":")
    line = f"Authorization: AWS4-HMAC-SHA256 {pad * (LINE_BYTES // len(pad))}x\r\n"
    head = (
        f"POST /sqs HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/x-amz-json-1.0"
        f"\r\nX-Amz-Target: AmazonSQS.ListQueues\r\nContent-Length: 2\r\nConnection: close\r\n"
        + line * LINES
        + "\r\n{}"
    )
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head.encode("latin-1"))  # U+00A0 as the one byte gunicorn reads it as
        answer = sock.makefile("rb").readline()
    return answer, time.monotonic() - started


@pytest.mark.parametrize("pad", [" ", "\u00a0", "\t "], ids=["spaces", "no-break spaces", "tabs"])
def test_sqs__two_long_signature_headers_at_once__403_and_healthz_unheld(
    broker: str, db_url: str, pad: str
) -> None:
    answers: list[tuple[bytes, float]] = []
    senders = [
        threading.Thread(target=lambda: answers.append(_long_signature_request(broker, pad)))
        for _ in range(2)
    ]
    for sender in senders:
        sender.start()
    time.sleep(0.2)  # both in the broker's hands
    started = time.monotonic()
    status, _ = call("GET", f"{broker}/healthz", timeout=30)
    healthz_s = time.monotonic() - started
    for sender in senders:
        sender.join(timeout=60)
    assert status == 200
    assert healthz_s < ANSWERED_WITHIN_S, f"/healthz took {healthz_s:.1f} s"
    assert len(answers) == 2
    for status_line, took in answers:
        assert status_line.split()[1] == b"403", status_line
        assert took < ANSWERED_WITHIN_S, f"refused after {took:.1f} s"

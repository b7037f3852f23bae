"""Requests gunicorn refuses before Django sees them (found by the fuzzer) still get JSON."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from broker.api.gunicorn_errors import write_json_error
from tests.procs import gunicorn


def _answer(raw: bytes) -> tuple[str, dict[str, str], object]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return status, headers, json.loads(body)


def _send(base: str, raw: bytes) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(raw)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_write_json_error__414__status_line_and_json_body() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        write_json_error(ours, 414, "URI Too Long", "Request Line is too large (5000 > 4094)")
        status, headers, body = _answer(theirs.recv(65536))
    assert status == "HTTP/1.1 414 URI Too Long"
    assert headers["Content-Type"] == "application/json"
    assert body == {"error": "URI Too Long: Request Line is too large (5000 > 4094)"}


@pytest.mark.e2e
@pytest.mark.postgres
def test_gunicorn__request_line_header_and_garbage_over_limits__json_errors(
    db_url: str, tmp_path: Path
) -> None:
    with gunicorn(db_url, tmp_path, WORKERS="1") as base:
        too_long = _send(base, b"GET /stats?x=" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        big_header = _send(
            base, b"GET /stats HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"
        )
        garbage = _send(base, b"GARBAGE\r\n\r\n")
    for raw, code in ((too_long, "414"), (big_header, "431"), (garbage, "400")):
        status, headers, body = _answer(raw)
        assert status.split()[1] == code
        assert headers["Content-Type"] == "application/json"
        assert isinstance(body, dict)
        assert set(body) == {"error"}

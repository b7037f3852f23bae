"""gunicorn's own error answers (request line or headers over its limits, a malformed request),
as JSON like every other error of the API, instead of gunicorn's HTML page.

Installed by gunicorn.conf.py before the workers fork; imports nothing from Django.
"""

from __future__ import annotations

import json
import socket

from gunicorn import util


def write_json_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """Drop-in for gunicorn.util.write_error: the same status line, a JSON body."""
    sentence = f"{reason}: {mesg}" if mesg else f"{reason}."
    body = json.dumps({"error": sentence}).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode("latin-1")
    util.write_nonblock(sock, head + body)


def install() -> None:
    util.write_error = write_json_error

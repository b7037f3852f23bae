"""Deadlines on reading a request, so that a client that stalls mid-request gives its thread back.

gunicorn's gthread waits for a request's first byte without holding a thread for long (5 s in
the thread, then in the poller), but reads the rest blocking, with no deadline: a client that
sent half a request and stopped held one of the process's threads until it hung up (found from
outside: two such clients starved a node run with 2 threads). Here, as nginx's
client_header_timeout and client_body_timeout do, a request's head must be whole within
`timeout_s` of the thread starting to read it, and each read of its body must bring something
within `timeout_s`. A head cut off is answered 408; a body cut off reads as ended early, which
the API answers as a body cut short (400). Either way the connection closes after.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from gunicorn.workers.gthread import TConn

# GUNICORN_CLIENT_TIMEOUT, seconds; parked long-polls hold no thread and are not affected.
DEFAULT_TIMEOUT_S = 30.0


def timeout_from_env() -> float:
    """GUNICORN_CLIENT_TIMEOUT as seconds (ValueError names the variable when it is not > 0)."""
    return seconds_from_env("GUNICORN_CLIENT_TIMEOUT", DEFAULT_TIMEOUT_S)


def seconds_from_env(
    name: str, default: float, *, zero_is_off: bool = False, most: float = float("inf")
) -> float:
    """The environment variable `name` as a finite number of seconds above 0 (or from 0, when
    0 turns its feature off) and up to `most`, `default` when unset or blank; ValueError names
    the variable."""
    raw = os.environ.get(name, "")
    try:
        value = float(raw) if raw.strip() else default
    except ValueError:
        value = -1.0
    if not ((0 <= value if zero_is_off else 0 < value) and value < float("inf") and value <= most):
        bound = "from 0 (0: off)" if zero_is_off else "above 0"
        if most < float("inf"):
            bound += f" to {most:g}"
        raise ValueError(f"{name} must be a number of seconds {bound}, not {raw!r}")
    return value


class DeadlineSocket:
    """The socket as gunicorn's parser reads it (recv), with the deadlines above.

    The socket's own timeout does the waiting, and is changed only when a deadline needs it: a
    request costs one more system call than gthread's (setting it at the start, since a head
    usually arrives whole in its first read), and a poll before each read and write, as any
    socket with a timeout (about 1 µs each). Between reads it stays near timeout_s, so writing
    an answer to a client that reads nothing does not hold the thread for ever either.
    """

    def __init__(self, sock: Any, timeout_s: float) -> None:
        self._sock = sock
        self.timeout_s = timeout_s
        self._slack = timeout_s / 100  # how late a deadline may be, to spare a system call
        self._set = timeout_s  # the socket's timeout, as this sets it
        self._head_until: float | None = None
        # A timeout gunicorn sets around its own bounded reads (the drain of an unread body).
        self._asked: float | None = None
        self.cut: str | None = None  # "head" or "body" once a read ran out of time

    def start_request(self) -> None:
        """The next read starts a request's head (call with the socket blocking)."""
        self._set_timeout(self.timeout_s)
        self._head_until = time.monotonic() + self.timeout_s
        self.cut = None

    def head_read(self) -> None:
        """The head is in: reads of the body are timed one by one."""
        self._head_until = None
        if self._set < self.timeout_s - self._slack:
            self._set_timeout(self.timeout_s)

    def recv(self, size: int) -> bytes:
        data: bytes
        if self._asked is not None:
            data = self._sock.recv(size)  # under gunicorn's own deadline: it handles it
            return data
        part = "body"
        if self._head_until is not None:
            part, wait = "head", self._head_until - time.monotonic()
            if wait <= 0:
                return self._cut(part)
            if wait < self._set - self._slack:
                self._set_timeout(wait)
        try:
            data = self._sock.recv(size)
        except TimeoutError:
            return self._cut(part)
        return data

    def gettimeout(self) -> float | None:
        return self._asked

    def settimeout(self, value: float | None) -> None:
        self._asked = value
        self._sock.settimeout(self._set if value is None else value)

    def _set_timeout(self, value: float) -> None:
        self._sock.settimeout(value)
        self._set = value

    def _cut(self, part: str) -> bytes:
        # As if the client had hung up: gunicorn's parser and the views already treat a request
        # that ends early (a head: closed unanswered; a body: shorter than its Content-Length).
        self.cut = part
        return b""


class DeadlineConn(TConn):
    """gthread's connection, its HTTP/1 requests read through a DeadlineSocket."""

    timeout_s = DEFAULT_TIMEOUT_S
    reader: DeadlineSocket | None = None
    answered = False  # whether the request being read got its answer's head

    def init(self) -> None:
        # gthread calls init() each time a thread takes the connection up, before each request.
        super().init()
        if self.reader is None:
            unreader = getattr(self.parser, "unreader", None)
            if self.is_http2 or unreader is None or not hasattr(unreader, "sock"):
                return  # HTTP/2 reads its frames its own way: served as gthread serves it
            self.reader = unreader.sock = DeadlineSocket(unreader.sock, self.timeout_s)
        self.reader.start_request()  # gthread set the socket blocking, without a deadline
        self.answered = False

    @property
    def cut(self) -> str | None:
        return None if self.reader is None else self.reader.cut


def cut_answer(part: str, timeout_s: float) -> bytes:
    """The answer, in JSON as API.md wants every error, to a request cut off before any view
    answered it: its head (408), or a body read before the views (a chunked one: 400, as the
    views answer a body cut short)."""
    if part == "head":
        status = "408 Request Timeout"
        message = f"The request did not arrive whole within {timeout_s:g} s"
    else:
        status = "400 Bad Request"
        message = f"The body stopped arriving for {timeout_s:g} s: the request was cut short"
    body = json.dumps({"error": f"{message}; the connection is closed."}).encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body

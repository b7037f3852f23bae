"""Fakes for the worker tests: an in-memory Broker and a tiny HTTP server shaped like the API."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from workers.wire import Claimed


def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    """Poll predicate until it holds or timeout_s passes; its last value."""
    end = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def stop_joined(runner: Any, thread: threading.Thread) -> float:
    """Stop runner and join its thread (which must end within 5 s): the seconds that took."""
    stopped_at = time.monotonic()
    runner.stop()
    thread.join(5)
    assert not thread.is_alive()
    return time.monotonic() - stopped_at


def delivery(task_id: str, payload: Any, *, type_: str | None = None) -> dict[str, Any]:
    """A claim answer as API.md shapes it."""
    return {
        "task": {
            "id": task_id,
            "payload": payload,
            "attempts": 1,
            "max_attempts": 3,
            "queue": "default",
            "priority": "normal",
            "type": type_,
            "created_at": "2026-01-01T00:00:00.000Z",
            "available_at": "2026-01-01T00:00:00.000Z",
        },
        "lease_id": f"lease-{task_id}",
        "deadline": "2026-01-01T00:00:30.000Z",
    }


class FakeBroker:
    """In-memory Broker: hands out queued deliveries, records what workers answer."""

    def __init__(self) -> None:
        """Empty queue; acks, nacks and extends are accepted."""
        self.deliveries: deque[dict[str, Any]] = deque()
        self.claim_errors: deque[Exception] = deque()
        self.claims = 0
        self.acks: list[tuple[str, str, Any]] = []
        self.nacks: list[tuple[str, str, str]] = []
        self.extends: list[tuple[str, str, int]] = []
        # Each progress report: (task id, lease id, report, lease_ms or None).
        self.reports: list[tuple[str, str, dict[str, Any], int | None]] = []
        self.waits: list[tuple[str, str, dict[str, Any]]] = []
        self.answer = True
        self.extend_answer = True
        self.cancelled = False
        self.ack_batches: list[list[str]] = []
        self.nack_batches: list[list[str]] = []
        # While set to an Event, each settle waits for it (once recorded): outcomes pile up
        # behind a settle in flight. first_settle is set when the first settle is recorded.
        self.settle_gate: threading.Event | None = None
        self.first_settle = threading.Event()
        # Per task id, the status its next ack gets instead of the usual answer (e.g. 413).
        self.ack_statuses: dict[str, int] = {}
        # Each settle-and-claim as it arrived: (ack ids, nack ids, max, wait_ms).
        self.settle_claims: list[tuple[list[str], list[str], int, int]] = []
        # Everything in arrival order: ("claim", ...), ("settle", ...), ("extend", ...).
        self.events: list[tuple[Any, ...]] = []
        # Handed out and not yet settled, now and at most (what a prefetch limit bounds).
        self.outstanding = 0
        self.max_outstanding = 0
        self.parked = 0  # claims waiting for a task right now
        self._cond = threading.Condition()

    def add(self, task_id: str, payload: Any, *, type_: str | None = None) -> dict[str, Any]:
        """Queue a delivery and wake a parked claim."""
        item = delivery(task_id, payload, type_=type_)
        with self._cond:
            self.deliveries.append(item)
            self._cond.notify_all()
        return item

    def add_typed(self, n: int, type_: str) -> list[str]:
        """Queue n tasks t0..t{n-1} of one type, empty payloads: their ids."""
        ids = [f"t{i}" for i in range(n)]
        for task_id in ids:
            self.add(task_id, {}, type_=type_)
        return ids

    def claim(self, wait_ms: int, lease_ms: int, queues: Any = ()) -> Any:
        """Like GET /jobs/next: park up to wait_ms; None when idle or cancelled."""
        end = time.monotonic() + wait_ms / 1000
        with self._cond:
            self.claims += 1
            if self.claim_errors:
                raise self.claim_errors.popleft()
            self.parked += 1
            try:
                while not self.deliveries and not self.cancelled:
                    left = end - time.monotonic()
                    if left <= 0:
                        return None
                    self._cond.wait(left)
            finally:
                self.parked -= 1
            if self.cancelled:
                return None
            return self._hand_out()

    def _hand_out(self) -> dict[str, Any]:
        self.outstanding += 1
        self.max_outstanding = max(self.max_outstanding, self.outstanding)
        return self.deliveries.popleft()

    def ack(self, task_id: str, lease_id: str, result: Any = None) -> bool:
        """Record; encodes result as BrokerClient would, so a bad result raises the same way."""
        json.dumps(result, allow_nan=False)
        with self._cond:
            self.acks.append((task_id, lease_id, result))
            self.events.append(("ack", task_id))
            self.outstanding -= 1
        return self.answer

    def nack(self, task_id: str, lease_id: str, error: str) -> bool:
        """Record."""
        with self._cond:
            self.nacks.append((task_id, lease_id, error))
            self.events.append(("nack", task_id))
            self.outstanding -= 1
        return self.answer

    def claim_many(self, max_n: int, wait_ms: int, lease_ms: int, queues: Any = ()) -> Any:
        """Like POST /jobs/claim: what claim() would give, plus up to max_n - 1 more ready."""
        first = self.claim(wait_ms, lease_ms, queues)
        if first is None:
            return []
        got = [first]
        with self._cond:
            while self.deliveries and len(got) < max_n:
                got.append(self._hand_out())
        return got

    def settle(self, acks: Any, nacks: Any) -> list[int]:
        """Like POST /jobs/ack then /jobs/nack: record each batch; a status per item."""
        json.dumps([r for _, _, r in acks], allow_nan=False)
        with self._cond:
            self.events.append(("settle", [t for t, _, _ in acks], [t for t, _, _ in nacks]))
            statuses = self._settle_locked(acks, nacks)
        self.first_settle.set()
        if self.settle_gate is not None:
            assert self.settle_gate.wait(10), "the test never opened the settle gate"
        return statuses

    def settle_and_claim(
        self, acks: Any, nacks: Any, max_n: int, wait_ms: int, lease_ms: int, queues: Any = ()
    ) -> Claimed:
        """Like POST /jobs/claim with acks and nacks: settled first, then claim_many()."""
        json.dumps([r for _, _, r in acks], allow_nan=False)
        with self._cond:
            ack_ids, nack_ids = [t for t, _, _ in acks], [t for t, _, _ in nacks]
            self.settle_claims.append((ack_ids, nack_ids, max_n, wait_ms))
            self.events.append(("claim", ack_ids, nack_ids, max_n, wait_ms))
            statuses = self._settle_locked(acks, nacks)
        return Claimed(statuses, self.claim_many(max_n, wait_ms, lease_ms, queues))

    def _settle_locked(self, acks: Any, nacks: Any) -> list[int]:
        answer = 204 if self.answer else 404
        statuses = []
        if acks:
            self.ack_batches.append([t for t, _, _ in acks])
        for item in acks:
            status = self.ack_statuses.pop(item[0], answer)
            if status == answer:
                self.acks.append(tuple(item))
                self.outstanding -= 1
            statuses.append(status)
        if nacks:
            self.nack_batches.append([t for t, _, _ in nacks])
            self.nacks.extend(tuple(item) for item in nacks)
            self.outstanding -= len(nacks)
            statuses.extend([answer] * len(nacks))
        return statuses

    def extend(self, task_id: str, lease_id: str, lease_ms: int) -> bool:
        """Record."""
        with self._cond:
            self.extends.append((task_id, lease_id, lease_ms))
            self.events.append(("extend", task_id))
        return self.extend_answer

    def progress(
        self, task_id: str, lease_id: str, report: dict[str, Any], lease_ms: int | None = None
    ) -> bool:
        """Record (encoded as BrokerClient would, so a bad report raises the same way)."""
        json.dumps(report, allow_nan=False)
        with self._cond:
            self.reports.append((task_id, lease_id, dict(report), lease_ms))
            self.events.append(("progress", task_id, dict(report), lease_ms))
        return self.extend_answer

    def wait(self, task_id: str, lease_id: str, body: dict[str, Any]) -> bool:
        """Record a suspend (POST /jobs/{id}/wait)."""
        with self._cond:
            self.waits.append((task_id, lease_id, dict(body)))
            self.events.append(("wait", task_id, dict(body)))
        return self.extend_answer

    def cancel_claims(self, *, hard: bool = True) -> None:
        """Wake parked claims; later ones return None."""
        with self._cond:
            self.cancelled = True
            self._cond.notify_all()


@dataclass
class Reply:
    """One scripted answer; hold_s delays it (cut short when the test ends)."""

    status: int
    body: Any = None
    hold_s: float = 0.0
    close: bool = False  # hang up after answering, unannounced (a keep-alive timeout)


@dataclass
class Seen:
    """One request the fake server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    client_port: int


@dataclass
class FakeServer:
    """State of the fake HTTP broker: scripted replies per (method, path), requests seen."""

    url: str = ""
    scripts: dict[tuple[str, str], deque[Reply]] = field(default_factory=dict)
    defaults: dict[tuple[str, str], Reply] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Consulted before the scripts; None from it falls back to them.
    responder: Callable[[Seen], Reply | None] | None = None
    # Bodies over this many bytes get 413, as BROKER_MAX_BODY_BYTES makes the broker do.
    max_body: int | None = None

    def script(self, method: str, path: str, *replies: Reply) -> None:
        """Answer the next requests to method path with replies, in order."""
        with self.lock:
            self.scripts.setdefault((method, path), deque()).extend(replies)

    def default(self, method: str, path: str, reply: Reply) -> None:
        """Answer method path with reply once its script is used up."""
        with self.lock:
            self.defaults[(method, path)] = reply

    def requests_to(self, method: str, path: str) -> list[Seen]:
        """The requests seen so far for method path."""
        with self.lock:
            return [s for s in self.seen if s.method == method and s.path == path]

    def take(self, seen: Seen) -> Reply:
        """Record seen and pick its reply; 404 for anything unscripted."""
        key = (seen.method, seen.path)
        with self.lock:
            self.seen.append(seen)
        if self.responder is not None:
            reply = self.responder(seen)
            if reply is not None:
                return reply
        with self.lock:
            queue = self.scripts.get(key)
            if queue:
                return queue.popleft()
            return self.defaults.get(key, Reply(404, {"error": "Not found."}))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse is visible
    timeout = 10
    server: _Server

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        fake = self.server.fake
        too_large = fake.max_body is not None and length > fake.max_body
        seen = Seen(
            method=self.command,
            path=parts.path,
            query=parse_qs(parts.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            # The broker's parser refuses NaN and Infinity; so does this one.
            body=None if too_large or not raw else json.loads(raw, parse_constant=_refuse),
            client_port=self.client_address[1],
        )
        if too_large:
            with fake.lock:
                fake.seen.append(seen)
            reply = Reply(413, {"error": "The body is over BROKER_MAX_BODY_BYTES."})
        else:
            reply = fake.take(seen)
        if reply.hold_s:
            self.server.fake.release.wait(reply.hold_s)
        data = b"" if reply.body is None else json.dumps(reply.body).encode()
        self.send_response(reply.status)
        if data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        if reply.close:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = _serve  # noqa: N815 - http.server's naming

    def log_message(self, fmt: str, *args: Any) -> None:
        """Quiet."""


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a cut-short long-poll handler may still be holding
    fake: FakeServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up on a held reply is expected here, not an error."""


def start_server(bind_only: bool = False) -> tuple[_Server, FakeServer]:
    """A fake broker on a free port; bind_only leaves it refusing connections until activated."""
    server = _Server(("127.0.0.1", 0), _Handler, bind_and_activate=False)
    server.server_bind()
    if not bind_only:
        server.server_activate()
    fake = FakeServer(url=f"http://127.0.0.1:{server.server_address[1]}")
    server.fake = fake
    return server, fake


def serve(server: _Server) -> threading.Thread:
    """Run the server's loop in a daemon thread."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    return thread


class Job:
    """A job type that waits for `after` (if given), sleeps, then returns what it was built
    with (or raises it)."""

    def __init__(
        self, seconds: float = 0.0, result: Any = None, after: threading.Event | None = None
    ) -> None:
        self.seconds, self.result, self.after = seconds, result, after
        self.started, self.finished = threading.Event(), threading.Event()

    def handler(self, payload: Any) -> Any:
        self.started.set()
        if self.after is not None:
            assert self.after.wait(10), "what the job waits for never came"
        time.sleep(self.seconds)
        self.finished.set()
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


def register(monkeypatch: Any, name: str, job: Any) -> Any:
    """`job.handler` as the handler of type `name` in the workers' registry, for this test only."""
    from workers import handlers

    monkeypatch.setitem(handlers.REGISTRY, name, handlers.Handler(name, job.handler))
    return job

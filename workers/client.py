"""The broker's HTTP API for workers and producers: verbs, timeouts, bearer token, retries."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any
from urllib.parse import quote, urlencode

from contract.backoff import backoff_s
from contract.limits import OUTAGE_GRACE_MS
from workers.leaseclock import lease_end
from workers.settling import BatchVerbs, error_text
from workers.transport import Response, Transport, TransportError, shown_url
from workers.wire import (
    BODY_REFUSED,
    MAX_ERROR_CHARS,
    NOT_TOLD,
    SETTLED,
    Broker,
    BrokerError,
    BrokerUnavailableError,
    Claimed,
    Delivery,
    Report,
    ResultRefusedError,
    Task,
)

__all__ = [
    "DEFAULT_BROKER_URL",
    "MAX_ERROR_CHARS",
    "Broker",
    "BrokerClient",
    "BrokerError",
    "BrokerUnavailableError",
    "Claimed",
    "Delivery",
    "ResultRefusedError",
    "Task",
    "backoff_s",
    "identity",
    "keyed",
]

log = logging.getLogger(__name__)

DEFAULT_BROKER_URL = "http://127.0.0.1:8080"


def identity() -> str:
    """The X-Broker-Worker value for the calling thread: host:pid:thread."""
    raw = f"{socket.gethostname()}:{os.getpid()}:{threading.current_thread().name}"
    # Header values must be latin-1; a thread name need not be.
    return raw.encode("ascii", "replace").decode("ascii")


def keyed(body: Any) -> Any:
    """`body` with an idempotency_key: its own, or a new random one when it has none (or null)."""
    if isinstance(body, dict) and body.get("idempotency_key") is None:
        return {**body, "idempotency_key": uuid.uuid4().hex}
    return body


@lru_cache(maxsize=32)
def _claim_path(wait_ms: int, lease_ms: int, queues: tuple[str, ...]) -> str:
    """The claim path, built once per distinct set of arguments (the worker loop repeats them)."""
    params: dict[str, Any] = {"wait_ms": wait_ms, "lease_ms": lease_ms}
    if queues:
        params["queue"] = ",".join(queues)
    return f"/jobs/next?{urlencode(params)}"


def _encode(body: Any) -> bytes:
    """JSON as the broker reads it; raises ValueError for NaN or Infinity, TypeError for others."""
    return json.dumps(body, allow_nan=False, separators=(",", ":")).encode()


class BrokerClient(BatchVerbs):
    """The broker's HTTP API. Thread-safe: each thread has its own keep-alive connection.

    Unreachable broker or 5xx: back off and retry. A claim retries until it succeeds or
    claims are cancelled; ack, nack and extend retry until the lease deadline passes (after
    which the broker reclaims the task by itself), or, once the broker answered 503 (its
    database away: nothing is reclaimed then, and leases that ran out meanwhile are held for
    BROKER_OUTAGE_GRACE_MS after it is back), until outage_grace_s after the last 503; enqueue
    and stats retry for give_up_s, enqueue with an idempotency key, so a retry never enqueues
    twice.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BROKER_URL,
        *,
        token: str | None = None,
        connect_timeout_s: float = 3.05,
        read_timeout_s: float = 10.0,
        claim_margin_s: float = 5.0,
        backoff_base_s: float = 0.2,
        backoff_cap_s: float = 5.0,
        give_up_s: float = 30.0,
        outage_grace_s: float = OUTAGE_GRACE_MS / 1000,
    ) -> None:
        """token, when given, is sent as a bearer token on every request.

        Raises ValueError when base_url is not an http(s) URL.
        """
        self.base_url = base_url.rstrip("/")
        self.shown_url = shown_url(self.base_url)  # for logs: no password
        self._cancelled = threading.Event()
        self._transport = Transport(
            self.base_url,
            headers={"Authorization": f"Bearer {token}"} if token else {},
            identity=identity,
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
            cancelled=self._cancelled,
        )
        self._claim_margin_s = claim_margin_s
        self._read_timeout_s = read_timeout_s
        self._backoff = (backoff_base_s, backoff_cap_s)
        self._give_up_s = give_up_s
        self._outage_grace_s = outage_grace_s
        # lease_id -> monotonic time after which the broker has surely reclaimed the task.
        self._lease_ends: dict[str, float] = {}
        self._jobs_url = "/jobs"  # paths are relative to base_url

    # -- plumbing -------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        url: str,
        *,
        until: float | None,
        body: Any = None,
        read_timeout_s: float | None = None,
        interruptible: bool = False,
        held: bool = False,
    ) -> Response | None:
        """Send until an answer below 500 arrives; None when until passed or claims cancelled.

        url is a path under base_url; until is a time.monotonic() deadline, or None to try
        forever. held: until is the end of a lease, which a 503 pushes to outage_grace_s after
        it. Raises ValueError/TypeError when body does not encode as JSON.
        """
        data = None if body is None else _encode(body)
        attempt = 0
        while True:
            if interruptible and self._cancelled.is_set():
                return None
            try:
                response = self._transport.request(
                    method, url, data, read_timeout_s=read_timeout_s, interruptible=interruptible
                )
                if response.status_code < 500:
                    return response
                problem = f"answered {response.status_code}"
                if held and until is not None and response.status_code == 503:
                    # The broker cannot reach its database: no sweeper reclaims the lease now,
                    # and once they can, leases that ended meanwhile are held for a grace.
                    until = max(until, time.monotonic() + self._outage_grace_s)
            except TransportError as exc:
                problem = f"unreachable ({exc})"
            if interruptible and self._cancelled.is_set():
                return None
            attempt += 1
            pause = backoff_s(attempt, *self._backoff)
            if until is not None:
                left = until - time.monotonic()
                if left <= 0:
                    log.warning("broker at %s %s on %s %s; giving up",
                                self.shown_url, problem, method, url)  # fmt: skip
                    return None
                pause = min(pause, left)
            log.warning("broker at %s %s on %s %s; retry in %.1f s",
                        self.shown_url, problem, method, url, pause)  # fmt: skip
            if interruptible:
                self._cancelled.wait(pause)
            else:
                time.sleep(pause)

    def _until(self, lease_ids: Iterable[str]) -> float:
        """Retry settles of these leases until the first of them ends (or give_up_s if unknown)."""
        ends = [self._lease_ends[lease] for lease in lease_ids if lease in self._lease_ends]
        return min(ends) if ends else time.monotonic() + self._give_up_s

    def _task_url(self, task_id: str, verb: str, lease_id: str) -> str:
        """/jobs/{id}/{verb}?lease_id=...; ids are opaque, so both are quoted."""
        task, lease = quote(task_id, safe=""), quote(lease_id, safe="")
        return f"{self._jobs_url}/{task}/{verb}?lease_id={lease}"

    def _finish(self, verb: str, task_id: str, lease_id: str, body: Any) -> tuple[int, str]:
        """Ack or nack, retrying until the lease ends: (status or NOT_TOLD, error text)."""
        url = self._task_url(task_id, verb, lease_id)
        response = self._send("POST", url, until=self._until((lease_id,)), body=body, held=True)
        if response is None:
            self._lease_ends.pop(lease_id, None)
            # The lease is over: the broker reclaims the task, it is not lost.
            log.error("could not %s task %s before its lease ended", verb, task_id)
            return NOT_TOLD, ""
        status = response.status_code
        if status == SETTLED:
            self._lease_ends.pop(lease_id, None)
            return status, ""
        text = error_text(response)
        if status not in BODY_REFUSED:  # the lease is lost; a refused body leaves it held
            self._lease_ends.pop(lease_id, None)
        log.warning("%s of task %s answered %s: %s", verb, task_id, status, text)
        return status, text

    def _remember(self, response: Response, deliveries: Sequence[Delivery], lease_ms: int) -> None:
        """Note when each new lease ends: at the deadline the broker answered (see leaseclock)."""
        # A claim's deliveries share one lease (and deadline): its end is worked out once.
        ends = {delivery["lease_id"]: delivery.get("deadline") for delivery in deliveries}
        for lease_id, deadline in ends.items():
            self._lease_ends[lease_id] = lease_end(
                deadline, lease_ms, response.sent_at, response.received_at
            )

    # -- one task -------------------------------------------------------------------------

    def claim(self, wait_ms: int, lease_ms: int, queues: Sequence[str] = ()) -> Delivery | None:
        """GET /jobs/next. The delivery, or None on 204 or after cancel_claims().

        Retries (with backoff) while the broker is unreachable or answers 5xx.
        Raises BrokerError on any other unexpected answer (400, 401, ...).
        """
        response = self._send(
            "GET",
            _claim_path(wait_ms, lease_ms, tuple(queues)),
            until=None,
            read_timeout_s=wait_ms / 1000 + self._claim_margin_s,
            interruptible=True,
        )
        if response is None or response.status_code == 204:
            return None
        if response.status_code != 200:
            raise BrokerError(response.status_code, error_text(response))
        try:
            delivery: Delivery = response.json()
            delivery["lease_id"]  # a body without it is unreadable
        except (ValueError, KeyError, TypeError) as exc:
            raise BrokerError(200, "claim answered with an unreadable body") from exc
        self._remember(response, (delivery,), lease_ms)
        return delivery

    def ack(self, task_id: str, lease_id: str, result: Any = None) -> bool:
        """POST /jobs/{id}/ack. True on 204; False on 404/409 (logged) or once the lease ended.

        Raises ResultRefusedError when the broker refused the result (400, 413: nack instead),
        TypeError/ValueError if result is not JSON-serializable.
        """
        body = None if result is None else {"result": result}
        status, text = self._finish("ack", task_id, lease_id, body)
        if status in BODY_REFUSED:
            raise ResultRefusedError(status, text)
        return status == SETTLED

    def nack(self, task_id: str, lease_id: str, error: str) -> bool:
        """POST /jobs/{id}/nack with the error text. True on 204; False as for ack."""
        body = {"error": error[:MAX_ERROR_CHARS]}
        return self._finish("nack", task_id, lease_id, body)[0] == SETTLED

    def extend(self, task_id: str, lease_id: str, lease_ms: int) -> bool:
        """POST /jobs/{id}/extend. True on 200; False when the lease is lost (404/409) or over."""
        url = f"{self._task_url(task_id, 'extend', lease_id)}&lease_ms={lease_ms}"
        response = self._send("POST", url, until=self._until((lease_id,)), held=True)
        if response is None:
            return False
        if response.status_code != 200:
            log.warning(
                "extend of task %s answered %s: %s",
                task_id,
                response.status_code,
                error_text(response),
            )
            return False
        self._note_deadline(response, lease_id, lease_ms)
        return True

    def wait(self, task_id: str, lease_id: str, body: dict[str, Any]) -> bool:
        """POST /jobs/{id}/wait: the held task gives its lease and attempt back and waits for an
        event (docs/events.md). True when suspended; False when the lease is lost (404/409) or
        over, or the broker refused the body (logged)."""
        url = self._task_url(task_id, "wait", lease_id)
        response = self._send("POST", url, until=self._until((lease_id,)), body=body, held=True)
        if response is None:
            return False
        if response.status_code != 200:
            log.warning("wait of task %s answered %s: %s", task_id, response.status_code,
                        error_text(response))  # fmt: skip
            return False
        self._lease_ends.pop(lease_id, None)  # the lease is given back
        return True

    def _note_deadline(self, response: Response, lease_id: str, lease_ms: int) -> None:
        """A lease extended: it now ends at the deadline the broker answered."""
        if lease_id in self._lease_ends:  # not acked or nacked meanwhile by another thread
            try:
                deadline = response.json().get("deadline")
            except (ValueError, AttributeError):
                deadline = None
            self._lease_ends[lease_id] = lease_end(
                deadline, lease_ms, response.sent_at, response.received_at
            )

    def progress(
        self, task_id: str, lease_id: str, report: Report, lease_ms: int | None = None
    ) -> bool:
        """POST /jobs/{id}/progress with the report (and lease_ms, which extends the lease).

        True when the broker took it; False when the lease is lost (404/409) or over. A report
        the broker refuses (400) is logged and dropped, the lease still extended when asked.
        Raises TypeError/ValueError if the report is not JSON.
        """
        url = self._task_url(task_id, "progress", lease_id)
        if lease_ms is not None:
            url += f"&lease_ms={lease_ms}"
        # held, as extend: a report (the heartbeat's, which extends) retried through an outage.
        response = self._send("POST", url, until=self._until((lease_id,)), body=report, held=True)
        if response is None:
            return False
        status = response.status_code
        if status == 400:
            log.error("progress of task %s refused: %s", task_id, error_text(response))
            return self.extend(task_id, lease_id, lease_ms) if lease_ms is not None else True
        if status != 200:
            log.warning(
                "progress of task %s answered %s: %s", task_id, status, error_text(response)
            )
            return False
        if lease_ms is not None:
            self._note_deadline(response, lease_id, lease_ms)
        return True

    def enqueue(self, body: dict[str, Any]) -> tuple[int, Any]:
        """POST /jobs (with `after`, the task waits for those). The status and the decoded JSON
        answer (None when there is none).

        Retries 5xx and an unreachable broker for give_up_s; raises BrokerUnavailableError then.
        A body without an idempotency_key is sent with a random one, the same on every retry:
        a 503 or a lost answer may hide a commit, and the broker answers the repeat with 200 and
        the first task's id instead of enqueueing it twice. A body with `unique` answers 200
        with `{"id": <the holder's>, "deduplicated": true}` when its key is held.
        """
        return self._post_or_raise(self._jobs_url, keyed(body))

    def put_type(self, name: str, body: dict[str, Any]) -> tuple[int, Any]:
        """PUT /types/{name}: register a job type (its schema and description). The status and
        the decoded JSON answer. Retries like enqueue(); raises BrokerUnavailableError when the
        broker stays away."""
        return self._send_or_raise("PUT", f"/types/{quote(name, safe='')}", body)

    def stats(self) -> dict[str, Any]:
        """GET /stats. Raises BrokerUnavailableError or BrokerError on failure."""
        response = self._send("GET", "/stats", until=time.monotonic() + self._give_up_s)
        if response is None:
            raise BrokerUnavailableError(0, f"broker at {self.base_url} unreachable or failing")
        if response.status_code != 200:
            raise BrokerError(response.status_code, error_text(response))
        stats: dict[str, Any] = response.json()
        return stats

    def enqueue_many(self, bodies: Sequence[dict[str, Any]]) -> tuple[int, Any]:
        """POST /jobs/batch (all or nothing). The status and the decoded JSON answer.

        Retries like enqueue(), each body keyed as enqueue() keys it (a retried batch answers
        the first ids); raises BrokerUnavailableError when the broker stays away.
        """
        jobs = [keyed(body) for body in bodies]
        return self._post_or_raise(f"{self._jobs_url}/batch", {"jobs": jobs})

    def submit_workflow(self, name: str, steps: Sequence[dict[str, Any]]) -> tuple[int, Any]:
        """POST /workflows: steps of {"ref", "job", "after": [refs], "after_policy"}, all or
        nothing. The status and the answer ({"id", "tasks": {ref: task id}} on 201).

        Retries like enqueue(); raises BrokerUnavailableError when the broker stays away.
        """
        return self._post_or_raise("/workflows", {"name": name, "steps": list(steps)})

    def _post_or_raise(self, url: str, body: Any) -> tuple[int, Any]:
        return self._send_or_raise("POST", url, body)

    def _send_or_raise(self, method: str, url: str, body: Any) -> tuple[int, Any]:
        response = self._send(method, url, until=time.monotonic() + self._give_up_s, body=body)
        if response is None:
            raise BrokerUnavailableError(0, f"broker at {self.base_url} unreachable or failing")
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, None

    # -- life cycle -----------------------------------------------------------------------

    def cancel_claims(self, *, hard: bool = True) -> None:
        """Make future claims return None, and parked ones at once: their sockets are shut down
        (hard), or only hung up, so that a claim the broker is answering still gets its task."""
        self._cancelled.set()
        self._transport.cut(socket.SHUT_RDWR if hard else socket.SHUT_WR)

    def close(self) -> None:
        """Close every thread's connection (call when no thread uses the client any more)."""
        self._transport.close()

"""HTTP client of the broker: one Session per thread, timeouts, bearer token, back-off and retry."""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Protocol, TypedDict
from urllib.parse import quote, urlencode

import requests

from workers.transport import CuttableAdapter, Cutter

log = logging.getLogger(__name__)

DEFAULT_BROKER_URL = "http://127.0.0.1:8080"
# The longest error text sent with a nack: far below the broker's body limit.
MAX_ERROR_CHARS = 8000

_TRANSIENT = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
)


class Task(TypedDict):
    """A task as the broker hands it out."""

    id: str
    payload: Any
    attempts: int
    max_attempts: int
    queue: str
    priority: str
    type: str | None
    created_at: str
    available_at: str


class Delivery(TypedDict):
    """The answer to a claim: the task, and the lease it is held under."""

    task: Task
    lease_id: str
    deadline: str


class BrokerError(Exception):
    """The broker gave an answer that retrying cannot fix (a 4xx other than the expected ones)."""

    def __init__(self, status: int, message: str) -> None:
        """status is the HTTP status, or 0 when the broker was never reached."""
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message


class BrokerUnavailableError(BrokerError):
    """The broker stayed unreachable or kept answering 5xx until we gave up."""


class Broker(Protocol):
    """What a worker needs from the broker; BrokerClient over HTTP, or a fake in tests."""

    def claim(self, wait_ms: int, lease_ms: int, queues: Sequence[str] = ()) -> Delivery | None:
        """Long-poll for a task; None when the wait elapsed or claims were cancelled."""
        ...

    def ack(self, task_id: str, lease_id: str, result: Any = None) -> bool:
        """Report success; False when the broker refused (404/409) or could not be told."""
        ...

    def nack(self, task_id: str, lease_id: str, error: str) -> bool:
        """Report failure; False when the broker refused (404/409) or could not be told."""
        ...

    def extend(self, task_id: str, lease_id: str, lease_ms: int) -> bool:
        """Push the lease deadline to now + lease_ms; False when the lease is lost or over."""
        ...

    def cancel_claims(self) -> None:
        """Make parked and future claims return None at once; ack, nack, extend keep working."""
        ...

    def claim_many(
        self, max_n: int, wait_ms: int, lease_ms: int, queues: Sequence[str] = ()
    ) -> list[Delivery]:
        """Long-poll for up to max_n tasks; [] when the wait elapsed or claims were cancelled."""
        ...

    def ack_many(self, acks: Sequence[tuple[str, str, Any]]) -> list[bool]:
        """Report successes (task id, lease id, result); per item, True when acked."""
        ...

    def nack_many(self, nacks: Sequence[tuple[str, str, str]]) -> list[bool]:
        """Report failures (task id, lease id, error); per item, True when nacked."""
        ...


def identity() -> str:
    """The X-Broker-Worker value for the calling thread: host:pid:thread."""
    raw = f"{socket.gethostname()}:{os.getpid()}:{threading.current_thread().name}"
    # Header values must be latin-1; a thread name need not be.
    return raw.encode("ascii", "replace").decode("ascii")


def backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Equal-jitter exponential backoff before retry number attempt (1-based)."""
    ceiling = min(cap_s, base_s * 2 ** (attempt - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - jitter, not crypto


@lru_cache(maxsize=32)
def _claim_url(base: str, wait_ms: int, lease_ms: int, queues: tuple[str, ...]) -> str:
    """The claim URL, built once per distinct set of arguments (the worker loop repeats them)."""
    params: dict[str, Any] = {"wait_ms": wait_ms, "lease_ms": lease_ms}
    if queues:
        params["queue"] = ",".join(queues)
    return f"{base}/jobs/next?{urlencode(params)}"


class _ThreadState:
    """One thread's Session, and the Cutter that can interrupt its claim."""

    def __init__(self, headers: dict[str, str], cancelled: threading.Event) -> None:
        """Build the Session once: trust_env off skips the proxy and netrc lookups per call."""
        self.cutter = Cutter(cancelled)
        self.session = requests.Session()
        self.session.trust_env = False
        adapter = CuttableAdapter(self.cutter)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.headers.update(headers)
        self.session.headers["X-Broker-Worker"] = identity()


class BrokerClient:
    """The broker's HTTP API for workers and producers. Thread-safe: each thread gets a Session.

    Unreachable broker or 5xx: back off and retry. A claim retries until it succeeds or
    claims are cancelled; ack, nack and extend retry until the lease deadline passes (after
    which the broker reclaims the task by itself); enqueue and stats retry for give_up_s.
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
    ) -> None:
        """token, when given, is sent as a bearer token on every request."""
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._connect_s = connect_timeout_s
        self._timeout = (connect_timeout_s, read_timeout_s)
        self._claim_margin_s = claim_margin_s
        self._backoff = (backoff_base_s, backoff_cap_s)
        self._give_up_s = give_up_s
        self._local = threading.local()
        self._states: list[_ThreadState] = []
        self._states_lock = threading.Lock()
        self._cancelled = threading.Event()
        # lease_id -> monotonic time after which the broker has surely reclaimed the task.
        self._lease_ends: dict[str, float] = {}
        self._jobs_url = f"{self.base_url}/jobs"
        self._stats_url = f"{self.base_url}/stats"

    # -- plumbing -------------------------------------------------------------------------

    def _state(self) -> _ThreadState:
        """The calling thread's state, built on its first request."""
        try:
            return self._local.state
        except AttributeError:
            state = _ThreadState(self._headers, self._cancelled)
            self._local.state = state
            with self._states_lock:
                self._states.append(state)
            return state

    def _send(
        self,
        method: str,
        url: str,
        *,
        until: float | None,
        body: Any = None,
        timeout: tuple[float, float] | None = None,
        interruptible: bool = False,
    ) -> requests.Response | None:
        """Send until an answer below 500 arrives; None when until passed or claims cancelled.

        until is a time.monotonic() deadline, or None to try forever.
        """
        state = self._state()
        attempt = 0
        while True:
            if interruptible and self._cancelled.is_set():
                return None
            try:
                if interruptible:
                    state.cutter.arm()
                try:
                    response = state.session.request(
                        method, url, json=body, timeout=timeout or self._timeout
                    )
                finally:
                    if interruptible:
                        state.cutter.disarm()
                if response.status_code < 500:
                    return response
                problem = f"answered {response.status_code}"
            except _TRANSIENT as exc:
                problem = f"unreachable ({type(exc).__name__})"
            if interruptible and self._cancelled.is_set():
                return None
            attempt += 1
            pause = backoff_s(attempt, *self._backoff)
            if until is not None:
                left = until - time.monotonic()
                if left <= 0:
                    log.warning("broker %s on %s %s; giving up", problem, method, url)
                    return None
                pause = min(pause, left)
            log.warning("broker %s on %s %s; retry in %.1f s", problem, method, url, pause)
            if interruptible:
                self._cancelled.wait(pause)
            else:
                time.sleep(pause)

    def _task_url(self, task_id: str, verb: str, lease_id: str) -> str:
        """/jobs/{id}/{verb}?lease_id=...; ids are opaque, so both are quoted."""
        task, lease = quote(task_id, safe=""), quote(lease_id, safe="")
        return f"{self._jobs_url}/{task}/{verb}?lease_id={lease}"

    def _finish(self, verb: str, task_id: str, lease_id: str, body: Any) -> bool:
        """Ack or nack, retrying until the lease ends; 404/409 are final answers."""
        until = self._lease_ends.get(lease_id) or time.monotonic() + self._give_up_s
        url = self._task_url(task_id, verb, lease_id)
        response = self._send("POST", url, until=until, body=body)
        self._lease_ends.pop(lease_id, None)
        if response is None:
            # The lease is over: the broker reclaims the task, it is not lost.
            log.error("could not %s task %s before its lease ended", verb, task_id)
            return False
        if response.status_code == 204:
            return True
        log.warning(
            "%s of task %s answered %s: %s",
            verb, task_id, response.status_code, _error_text(response),
        )
        return False

    # -- the API --------------------------------------------------------------------------

    def claim(self, wait_ms: int, lease_ms: int, queues: Sequence[str] = ()) -> Delivery | None:
        """GET /jobs/next. The delivery, or None on 204 or after cancel_claims().

        Retries (with backoff) while the broker is unreachable or answers 5xx.
        Raises BrokerError on any other unexpected answer (400, 401, ...).
        """
        url = _claim_url(self.base_url, wait_ms, lease_ms, tuple(queues))
        timeout = (self._connect_s, wait_ms / 1000 + self._claim_margin_s)
        response = self._send("GET", url, until=None, timeout=timeout, interruptible=True)
        if response is None or response.status_code == 204:
            return None
        if response.status_code != 200:
            raise BrokerError(response.status_code, _error_text(response))
        try:
            delivery: Delivery = response.json()
            lease_id = delivery["lease_id"]
        except (ValueError, KeyError, TypeError) as exc:
            raise BrokerError(200, "claim answered with an unreadable body") from exc
        # The broker started the lease after we sent: our estimate ends no later than its.
        self._lease_ends[lease_id] = _sent_at(response) + lease_ms / 1000
        return delivery

    def ack(self, task_id: str, lease_id: str, result: Any = None) -> bool:
        """POST /jobs/{id}/ack. True on 204; False on 404/409 (logged) or once the lease ended.

        Raises TypeError/ValueError if result is not JSON-serializable.
        """
        body = None if result is None else {"result": result}
        return self._finish("ack", task_id, lease_id, body)

    def nack(self, task_id: str, lease_id: str, error: str) -> bool:
        """POST /jobs/{id}/nack with the error text. True on 204; False as for ack."""
        return self._finish("nack", task_id, lease_id, {"error": error[:MAX_ERROR_CHARS]})

    def extend(self, task_id: str, lease_id: str, lease_ms: int) -> bool:
        """POST /jobs/{id}/extend. True on 200; False when the lease is lost (404/409) or over."""
        until = self._lease_ends.get(lease_id) or time.monotonic() + self._give_up_s
        url = f"{self._task_url(task_id, 'extend', lease_id)}&lease_ms={lease_ms}"
        response = self._send("POST", url, until=until)
        if response is None:
            return False
        if response.status_code != 200:
            log.warning(
                "extend of task %s answered %s: %s",
                task_id, response.status_code, _error_text(response),
            )
            return False
        if lease_id in self._lease_ends:  # not acked or nacked meanwhile by another thread
            self._lease_ends[lease_id] = _sent_at(response) + lease_ms / 1000
        return True

    def enqueue(self, body: dict[str, Any]) -> tuple[int, Any]:
        """POST /jobs. The status and the decoded JSON answer (None when there is none).

        Retries 5xx and an unreachable broker for give_up_s; raises BrokerUnavailableError then.
        """
        response = self._send("POST", self._jobs_url, until=time.monotonic() + self._give_up_s,
                              body=body)
        if response is None:
            raise BrokerUnavailableError(0, f"broker at {self.base_url} unreachable or failing")
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, None

    # -- batches (API.md, "Batch endpoints") ---------------------------------------------------

    def claim_many(
        self, max_n: int, wait_ms: int, lease_ms: int, queues: Sequence[str] = ()
    ) -> list[Delivery]:
        """POST /jobs/claim. 1 to max_n deliveries, or [] on 204 or after cancel_claims().

        Retries like claim(); raises BrokerError on any other unexpected answer.
        """
        body: dict[str, Any] = {"max": max_n, "wait_ms": wait_ms, "lease_ms": lease_ms}
        if queues:
            body["queues"] = list(queues)
        timeout = (self._connect_s, wait_ms / 1000 + self._claim_margin_s)
        response = self._send("POST", f"{self._jobs_url}/claim", until=None, body=body,
                              timeout=timeout, interruptible=True)
        if response is None or response.status_code == 204:
            return []
        if response.status_code != 200:
            raise BrokerError(response.status_code, _error_text(response))
        try:
            deliveries: list[Delivery] = response.json()["deliveries"]
            lease_ids = [d["lease_id"] for d in deliveries]
        except (ValueError, KeyError, TypeError) as exc:
            raise BrokerError(200, "claim answered with an unreadable body") from exc
        lease_end = _sent_at(response) + lease_ms / 1000
        for lease_id in lease_ids:
            self._lease_ends[lease_id] = lease_end
        return deliveries

    def ack_many(self, acks: Sequence[tuple[str, str, Any]]) -> list[bool]:
        """POST /jobs/ack of (task id, lease id, result) items; per item True when acked.

        Retries until the earliest lease among them ends; an item's 404/409 is final (logged).
        Raises TypeError/ValueError if a result is not JSON-serializable.
        """
        items = [{"id": t, "lease_id": lease, "result": r} for t, lease, r in acks]
        return self._finish_many("ack", items)

    def nack_many(self, nacks: Sequence[tuple[str, str, str]]) -> list[bool]:
        """POST /jobs/nack of (task id, lease id, error) items; per item True as for ack_many."""
        items = [
            {"id": t, "lease_id": lease, "error": error[:MAX_ERROR_CHARS]}
            for t, lease, error in nacks
        ]
        return self._finish_many("nack", items)

    def _finish_many(self, verb: str, items: list[dict[str, Any]]) -> list[bool]:
        """One batch ack or nack; [] for no items."""
        if not items:
            return []
        lease_ids = [item["lease_id"] for item in items]
        ends = [self._lease_ends[lease] for lease in lease_ids if lease in self._lease_ends]
        until = min(ends) if ends else time.monotonic() + self._give_up_s
        response = self._send("POST", f"{self._jobs_url}/{verb}", until=until,
                              body={f"{verb}s": items})
        for lease_id in lease_ids:
            self._lease_ends.pop(lease_id, None)
        if response is None:
            log.error("could not %s %d tasks before the first lease ended", verb, len(items))
            return [False] * len(items)
        try:
            results = response.json()["results"] if response.status_code == 200 else None
            statuses = {r["id"]: r["status"] for r in results} if results else {}
        except (ValueError, KeyError, TypeError):
            statuses = {}
        if response.status_code != 200 or len(statuses) != len(items):
            log.warning("%s of %d tasks answered %s: %s",
                        verb, len(items), response.status_code, _error_text(response))
        done = []
        for item in items:
            status = statuses.get(item["id"])
            if status != 204 and status is not None:
                log.warning("%s of task %s answered %s", verb, item["id"], status)
            done.append(status == 204)
        return done

    def enqueue_many(self, bodies: Sequence[dict[str, Any]]) -> tuple[int, Any]:
        """POST /jobs/batch (all or nothing). The status and the decoded JSON answer.

        Retries like enqueue(); raises BrokerUnavailableError when the broker stays away.
        """
        response = self._send("POST", f"{self._jobs_url}/batch",
                              until=time.monotonic() + self._give_up_s,
                              body={"jobs": list(bodies)})
        if response is None:
            raise BrokerUnavailableError(0, f"broker at {self.base_url} unreachable or failing")
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, None

    def stats(self) -> dict[str, Any]:
        """GET /stats. Raises BrokerUnavailableError or BrokerError on failure."""
        response = self._send("GET", self._stats_url, until=time.monotonic() + self._give_up_s)
        if response is None:
            raise BrokerUnavailableError(0, f"broker at {self.base_url} unreachable or failing")
        if response.status_code != 200:
            raise BrokerError(response.status_code, _error_text(response))
        stats: dict[str, Any] = response.json()
        return stats

    def cancel_claims(self) -> None:
        """Make parked and future claims return None at once (their sockets are shut down)."""
        self._cancelled.set()
        with self._states_lock:
            states = list(self._states)
        for state in states:
            state.cutter.cut()

    def close(self) -> None:
        """Close every thread's Session (call when no thread uses the client any more)."""
        with self._states_lock:
            states, self._states = self._states, []
        for state in states:
            state.session.close()


def _sent_at(response: requests.Response) -> float:
    """When the request that got response went out, on the time.monotonic() clock."""
    return time.monotonic() - response.elapsed.total_seconds()


def _error_text(response: requests.Response) -> str:
    """The broker's {"error": ...} sentence, or the start of the raw body."""
    try:
        return str(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200] or response.reason or ""

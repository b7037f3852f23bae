"""Lean HTTP to the broker: one urllib3 connection per thread, which another thread can cut."""

from __future__ import annotations

import functools
import http.client
import json
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import LocationParseError
from urllib3.util import Timeout, Url, parse_url

try:  # the CA bundle requests used; without it, the system's
    import certifi

    _CA_CERTS: str | None = certifi.where()
except ImportError:  # pragma: no cover - certifi comes with requests
    _CA_CERTS = None

USER_AGENT = "queue-broker-worker"
# Everything that means "no answer came": refused, reset, timed out, cut, TLS failure.
_TRANSIENT = (Urllib3Error, OSError, http.client.HTTPException)


class TransportError(Exception):
    """The broker could not be reached, or the exchange broke off before a whole answer; the
    message names the error underneath (`ConnectionRefusedError: [Errno 111] Connection
    refused`)."""


def describe(exc: BaseException) -> str:
    """The innermost cause of a transport error as `Type: message`: what the operating system
    said, not the wrapper urllib3 put around it."""
    seen = {id(exc)}
    while True:
        inner = exc.__cause__ or exc.__context__
        if inner is None or id(inner) in seen:
            break
        seen.add(id(inner))
        exc = inner
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Response:
    """A whole answer: status, raw body, and when its request went out and its answer came in
    (time.monotonic(): the broker acted between the two)."""

    __slots__ = ("content", "reason", "received_at", "sent_at", "status_code")

    def __init__(
        self,
        status_code: int,
        content: bytes,
        reason: str,
        sent_at: float,
        received_at: float | None = None,
    ) -> None:
        """Built by Transport.request; received_at defaults to sent_at (an instant exchange)."""
        self.status_code = status_code
        self.content = content
        self.reason = reason
        self.sent_at = sent_at
        self.received_at = sent_at if received_at is None else received_at

    def json(self) -> Any:
        """The body decoded; raises ValueError when it is not JSON."""
        return json.loads(self.content)

    @property
    def text(self) -> str:
        """The body as text (for error messages)."""
        return self.content.decode("utf-8", "replace")


class Cutter:
    """The connections of one thread, and whether a cut-short request is in flight.

    A thread parked in a 20 s long-poll stays parked whatever happens to its pool. Shutting its
    socket down from another thread makes the blocked recv() return at once.
    """

    def __init__(self, cancelled: threading.Event) -> None:
        """cancelled is shared by every thread of one client: once set, cuts apply."""
        self._cancelled = cancelled
        self._lock = threading.Lock()
        self._conns: weakref.WeakSet[HTTPConnection] = weakref.WeakSet()
        self._armed = False

    def arm(self) -> None:
        """Mark the start of a request that cut() may interrupt (a claim)."""
        with self._lock:
            self._armed = True

    def disarm(self) -> None:
        """Mark its end: ack and nack on this thread must never be cut."""
        with self._lock:
            self._armed = False

    def track(self, conn: Any) -> None:
        """Remember a freshly connected connection; cut it at once if a cut already happened."""
        with self._lock:
            self._conns.add(conn)
            # A cut that ran between the claim's armed check and this connect found no socket.
            if self._armed and self._cancelled.is_set():
                _shutdown(conn, socket.SHUT_RDWR)

    def cut(self, how: int = socket.SHUT_RDWR) -> None:
        """Shut down this thread's sockets if it is in an armed request; otherwise do nothing.
        how=SHUT_WR only hangs up: the broker drops a parked claim at once, and an answer
        already on its way (a task handed out) still arrives."""
        with self._lock:
            if self._armed:
                for conn in list(self._conns):
                    _shutdown(conn, how)


def _shutdown(conn: HTTPConnection, how: int) -> None:
    """Shut the socket down (not close: the owning thread still holds it and will close it)."""
    sock = conn.sock
    if sock is None:
        return
    try:
        # The plain socket method: SSLSocket.shutdown would also drop its SSL object under the
        # reading thread's feet.
        socket.socket.shutdown(sock, how)
    except OSError:
        pass  # already closed or never connected: nothing left to interrupt


class _Tracked:
    """Mixed into an HTTP(S) connection: reports the connection to its Cutter once connected."""

    def __init__(self, *args: Any, cutter: Cutter, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cutter = cutter

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]  # the connection class's, next in the MRO
        self._cutter.track(self)


class _TrackedHTTPConnection(_Tracked, HTTPConnection):
    pass


class _TrackedHTTPSConnection(_Tracked, HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


class _Lane:
    """One thread's pool (one keep-alive connection), Cutter and ready-made headers."""

    def __init__(self, pool: HTTPConnectionPool, cutter: Cutter, headers: dict[str, str]) -> None:
        """headers already carry the thread's identity."""
        self.pool = pool
        self.cutter = cutter
        self.headers = headers
        self.json_headers = {**headers, "Content-Type": "application/json"}


def broker_url(base_url: str) -> Url:
    """base_url as http(s)://host[:port][/prefix], parsed; raises ValueError for anything else."""
    try:
        url = parse_url(base_url)
    except LocationParseError:
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"broker URL must be http:// or https://host[:port]: {base_url!r}")
    return url


def shown_url(base_url: str) -> str:
    """base_url as logs may show it: without a user name or password, if it carries one."""
    try:
        url = parse_url(base_url)
    except LocationParseError:
        return base_url
    return url._replace(auth=None).url if url.auth else base_url


class Transport:
    """Requests to one broker, each thread on its own connection: no lock on the hot path.

    Everything per request that can be built once is: the pool, the headers, the timeouts.
    No retries here: the client decides what to retry and for how long.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str],
        identity: Callable[[], str],
        connect_timeout_s: float,
        read_timeout_s: float,
        cancelled: threading.Event,
    ) -> None:
        """base_url is http(s)://host[:port][/prefix]; raises ValueError for anything else.

        identity() names the calling thread (the X-Broker-Worker header), once per thread.
        """
        url = broker_url(base_url)
        self._pool_class: Callable[..., HTTPConnectionPool] = (
            functools.partial(_HTTPSPool, cert_reqs="CERT_REQUIRED", ca_certs=_CA_CERTS)
            if url.scheme == "https"
            else _HTTPPool
        )
        self._host, self._port = url.host, url.port
        self._prefix = (url.path or "").rstrip("/")
        self._headers = {"User-Agent": USER_AGENT, **headers}
        self._identity = identity
        self._connect_s = connect_timeout_s
        self._timeout = Timeout(connect=connect_timeout_s, read=read_timeout_s)
        self._timeouts: dict[float, Timeout] = {}
        self._cancelled = cancelled
        self._local = threading.local()
        self._lanes: list[_Lane] = []
        self._lanes_lock = threading.Lock()

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        read_timeout_s: float | None = None,
        interruptible: bool = False,
    ) -> Response:
        """One request on the calling thread's connection; raises TransportError if no answer.

        path is relative to the base URL (e.g. "/jobs/claim"); a body is sent as JSON.
        interruptible: cut() may shut the request down (claims only).
        """
        lane = self._lane()
        timeout = self._timeout if read_timeout_s is None else self._timeout_for(read_timeout_s)
        if interruptible:
            lane.cutter.arm()
        try:
            sent_at = time.monotonic()
            answer = lane.pool.urlopen(
                method,
                self._prefix + path,
                body=body,
                headers=lane.headers if body is None else lane.json_headers,
                retries=False,
                redirect=False,
                timeout=timeout,
                assert_same_host=False,
            )
            return Response(
                answer.status, answer.data, answer.reason or "", sent_at, time.monotonic()
            )
        except _TRANSIENT as exc:
            raise TransportError(describe(exc)) from exc
        finally:
            if interruptible:
                lane.cutter.disarm()

    def cut(self, how: int = socket.SHUT_RDWR) -> None:
        """Shut down every thread's interruptible request in flight (see Cutter)."""
        with self._lanes_lock:
            lanes = list(self._lanes)
        for lane in lanes:
            lane.cutter.cut(how)

    def close(self) -> None:
        """Close every thread's connection (call when no thread uses the transport any more)."""
        with self._lanes_lock:
            lanes, self._lanes = self._lanes, []
        for lane in lanes:
            lane.pool.close()

    def _lane(self) -> _Lane:
        """The calling thread's lane, built on its first request."""
        try:
            lane: _Lane = self._local.lane
        except AttributeError:
            cutter = Cutter(self._cancelled)
            pool = self._pool_class(
                self._host, self._port, maxsize=1, block=False, retries=False, cutter=cutter
            )
            lane = _Lane(pool, cutter, {**self._headers, "X-Broker-Worker": self._identity()})
            self._local.lane = lane
            with self._lanes_lock:
                self._lanes.append(lane)
        return lane

    def _timeout_for(self, read_s: float) -> Timeout:
        """A Timeout per distinct read timeout (claims repeat theirs)."""
        timeout = self._timeouts.get(read_s)
        if timeout is None:
            timeout = self._timeouts[read_s] = Timeout(connect=self._connect_s, read=read_s)
        return timeout

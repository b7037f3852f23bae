"""HTTP adapter whose sockets another thread can shut down, to cut a parked long-poll short."""

from __future__ import annotations

import functools
import socket
import threading
import weakref
from typing import Any

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool


class Cutter:
    """The connections of one thread's session, and whether a cut-short request is in flight.

    Closing a requests.Session does not touch a connection that is checked out of its pool,
    so a thread parked in a 20 s long-poll would stay parked. Shutting the socket down from
    another thread makes its blocked recv() return at once.
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

    def track(self, conn: HTTPConnection) -> None:
        """Remember a freshly connected connection; cut it at once if a cut already happened."""
        with self._lock:
            self._conns.add(conn)
            # A cut that ran between the claim's armed check and this connect found no socket.
            if self._armed and self._cancelled.is_set():
                _shutdown(conn)

    def cut(self) -> None:
        """Shut down this thread's sockets if it is in an armed request; otherwise do nothing."""
        with self._lock:
            if self._armed:
                for conn in list(self._conns):
                    _shutdown(conn)


def _shutdown(conn: HTTPConnection) -> None:
    """Shut the socket down (not close: the owning thread still holds it and will close it)."""
    sock = conn.sock
    if sock is None:
        return
    try:
        # The plain socket method: SSLSocket.shutdown would also drop its SSL object under the
        # reading thread's feet.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed or never connected: nothing left to interrupt


class _TrackedHTTPConnection(HTTPConnection):
    """An HTTP connection that reports itself to its Cutter once connected."""

    def __init__(self, *args: Any, cutter: Cutter, **kwargs: Any) -> None:
        """Same as HTTPConnection, plus the Cutter to report to."""
        super().__init__(*args, **kwargs)
        self._cutter = cutter

    def connect(self) -> None:
        """Connect, then report."""
        super().connect()
        self._cutter.track(self)


class _TrackedHTTPSConnection(HTTPSConnection):
    """An HTTPS connection that reports itself to its Cutter once connected."""

    def __init__(self, *args: Any, cutter: Cutter, **kwargs: Any) -> None:
        """Same as HTTPSConnection, plus the Cutter to report to."""
        super().__init__(*args, **kwargs)
        self._cutter = cutter

    def connect(self) -> None:
        """Connect, then report."""
        super().connect()
        self._cutter.track(self)


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


class CuttableAdapter(HTTPAdapter):
    """A one-connection HTTPAdapter whose connections report to a Cutter."""

    def __init__(self, cutter: Cutter) -> None:
        """One session serves one thread, so one pooled connection per host is enough."""
        self._cutter = cutter
        super().__init__(pool_connections=1, pool_maxsize=1)

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        """Build the usual PoolManager, with pools whose connections carry the Cutter."""
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        # Extra pool keyword arguments travel to the connection constructor (conn_kw).
        self.poolmanager.pool_classes_by_scheme = {
            "http": functools.partial(_HTTPPool, cutter=self._cutter),
            "https": functools.partial(_HTTPSPool, cutter=self._cutter),
        }

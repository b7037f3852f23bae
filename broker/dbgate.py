"""PostgreSQL connections that wait their turn to reconnect (one real attempt per interval per
process while the database is away), and that renew their pool's idle connections when one of
them is lost, in every process of the node (broker.dbpool.prepare makes it every pool's class)."""

from __future__ import annotations

import math
import mmap
import struct
import threading
import time
import zlib
from typing import Any, ClassVar

import psycopg


class _Gate:
    """When this process last failed to connect to PostgreSQL."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failed_at = -math.inf

    def shut(self, every_s: float) -> bool:
        """Whether an attempt failed less than (about) every_s ago."""
        with self._lock:
            return time.monotonic() - self._failed_at < every_s * 0.9

    def record(self, ok: bool) -> None:
        with self._lock:
            self._failed_at = -math.inf if ok else time.monotonic()


class _NodeLoss:
    """When a process of this node last lost a connection (time.monotonic(), which every process
    of a host shares), and to which server (server_key), in memory gunicorn's workers share: made
    at import, in the master, which loads the app before it forks them (preload_app).

    A host that vanishes tells nothing to the connections that wait idle in a pool: a process
    learns only when a request of its own has waited out its 10 s. Seen from one process alone, a
    worker that sent nothing in the first seconds learnt 10 s after its siblings, holding its first
    request after the vanish on a dead connection for 10 s more: one producer's writes came back
    22 s after the vanish, not 12.
    """

    _FORMAT = "dI"

    def __init__(self) -> None:
        self._shared = mmap.mmap(-1, struct.calcsize(self._FORMAT))  # MAP_SHARED, anonymous
        self.record(-math.inf, 0)

    def record(self, at: float, server: int) -> None:
        struct.pack_into(self._FORMAT, self._shared, 0, at, server)

    def last(self) -> float:
        at: float = struct.unpack_from(self._FORMAT, self._shared, 0)[0]
        return at

    def lost_since(self, at: float, server: int) -> bool:
        """Whether a connection to `server` was the last one lost, after `at`."""
        lost_at, lost_server = struct.unpack_from(self._FORMAT, self._shared, 0)
        return bool(lost_at > at and lost_server == server)


def server_key(conn: psycopg.Connection[Any]) -> int:
    """The server `conn` reached (of a multi-host URL's, the one it is connected to), as a number
    the node's processes compare."""
    return zlib.crc32(f"{conn.info.host}:{conn.info.port}".encode())


_gate = _Gate()
_node_loss = _NodeLoss()
_drain_lock = threading.Lock()


def lost_since(at: float, server: int) -> bool:
    """Whether a process of this node lost a connection to `server` (server_key) after `at`, the
    last one it lost."""
    return _node_loss.lost_since(at, server)


class GatedConnection(psycopg.Connection):
    """The pool's connections. A pool that lost its 16 connections retries each of them on its
    own schedule: with attempts BROKER_DB_RECONNECT_MS apart, 80 a second per process, each one a
    full connection to a standby that refuses it (target_session_attrs=read-write), right when
    the standbys are busy promoting one of themselves. So while an attempt failed less than an
    interval ago, the others fail at once without going out: one real attempt per interval per
    process, and the first that succeeds opens the way for all."""

    every_s: ClassVar[float] = 0.2
    connected_at = -math.inf  # time.monotonic() when connected
    server = 0  # server_key()

    @classmethod
    def connect(cls, *args: Any, **kwargs: Any) -> Any:
        if _gate.shut(cls.every_s):
            raise psycopg.OperationalError(
                "not connecting: an attempt failed less than BROKER_DB_RECONNECT_MS ago"
            )
        try:
            conn = super().connect(*args, **kwargs)
        except psycopg.OperationalError:
            _gate.record(ok=False)
            raise
        _gate.record(ok=True)
        conn.connected_at = time.monotonic()
        conn.server = server_key(conn)
        return conn

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().wait(*args, **kwargs)
        except psycopg.Error:
            if self.broken:
                _node_loss.record(time.monotonic(), self.server)
                self.renew_pool()
            raise

    def outlived_a_loss(self) -> bool:
        """Whether a process of this node lost a connection since this one was made: a checkout
        (broker.dbpool.check_if_disturbed) then renews the pool instead of handing it out."""
        return self.connected_at < _node_loss.last()

    def renew_pool(self) -> None:
        """This connection broke, or one of the node's did since it was made: its pool's idle
        ones, made to the same server, are replaced at once, unchecked.

        They went with it when the server restarted or failed over; when its host vanished (a
        power cut, a partition), nothing says so until each one's TCP timeout, so each would
        hold the next request given it for 10 s (settings.BROKER_DB_TCP_OPTIONS), and a round
        trip to check them as long each. Those in use are replaced when they come back. One
        connection a server closed on its own (an idle timeout, a terminated backend) renews the
        pool needlessly, in every process of the node: a few reconnections each. Connections lost
        together renew it once.
        """
        pool = getattr(self, "_pool", None)
        if pool is None:
            return
        with _drain_lock:
            if self.connected_at <= getattr(pool, "broker_drained_at", -math.inf):
                return  # made before the last renewal, which took its idle peers
            pool.broker_drained_at = time.monotonic()
        pool.drain()

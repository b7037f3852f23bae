"""PostgreSQL connections that wait their turn to reconnect (one real attempt per interval per
process while the database is away), and that renew their pool's idle connections when one of
them is lost (broker.dbpool.prepare makes it every pool's class)."""

from __future__ import annotations

import math
import threading
import time
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


_gate = _Gate()
_drain_lock = threading.Lock()


class GatedConnection(psycopg.Connection):
    """The pool's connections. A pool that lost its 16 connections retries each of them on its
    own schedule: with attempts BROKER_DB_RECONNECT_MS apart, 80 a second per process, each one a
    full connection to a standby that refuses it (target_session_attrs=read-write), right when
    the standbys are busy promoting one of themselves. So while an attempt failed less than an
    interval ago, the others fail at once without going out: one real attempt per interval per
    process, and the first that succeeds opens the way for all."""

    every_s: ClassVar[float] = 0.2
    connected_at = -math.inf  # time.monotonic() when connected

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
        return conn

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().wait(*args, **kwargs)
        except psycopg.Error:
            if self.broken:
                self._lost()
            raise

    def _lost(self) -> None:
        """This connection broke: its pool's idle ones, made to the same server, are replaced
        at once, unchecked.

        They went with it when the server restarted or failed over; when its host vanished (a
        power cut, a partition), nothing says so until each one's TCP timeout, so each would
        hold the next request given it for 10 s (settings.BROKER_DB_TCP_OPTIONS), and a round
        trip to check them as long each. Those in use are replaced when they come back. One
        connection a server closed on its own (an idle timeout, a terminated backend) renews the
        pool needlessly: a few reconnections. Connections lost together renew it once.
        """
        pool = getattr(self, "_pool", None)
        if pool is None:
            return
        with _drain_lock:
            if self.connected_at <= getattr(pool, "broker_drained_at", -math.inf):
                return  # made before the last renewal, which took its idle peers
            pool.broker_drained_at = time.monotonic()
        pool.drain()

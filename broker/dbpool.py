"""The PostgreSQL pool's tuning: a health check that costs a syscall, not a round trip, per
request, and reconnect attempts spaced evenly instead of 1, 2, 4, 8 ... seconds apart, at most one
going out per interval however many connections the pool lost."""

from __future__ import annotations

import logging
import math
import select
import time
from typing import Any


def check_if_disturbed(conn: Any) -> None:
    """Check a pooled connection before a request gets it, cheaply.

    An idle, healthy connection has nothing to read. One whose server restarted or went away has
    (end of file, or an error message), so only then pay psycopg_pool's round-trip check, which
    raises and makes the pool drop the connection. Profiled (py-spy, enqueue/claim/ack): the
    round trip on every checkout was 23% of a gunicorn worker's samples.

    A disturbed connection means its server went away: the other idle ones are as stale, and the
    pool would find them one by one, sleeping a reconnect interval after each. The check breaks
    it, and a connection that breaks has its pool replace the idle ones at once
    (broker.dbgate.GatedConnection). So does one made before another process of the node lost
    one: a vanished host tells its idle connections nothing, and each would hold a request 10 s.
    """
    from psycopg import OperationalError
    from psycopg_pool import ConnectionPool

    if conn.closed or conn.broken:
        raise OperationalError("connection is closed")
    outlived = getattr(conn, "outlived_a_loss", None)  # a GatedConnection's
    if outlived is not None and outlived():
        conn.renew_pool()
        raise OperationalError("made before a connection of this node was lost")
    if _readable(conn.fileno()):
        ConnectionPool.check_connection(conn)


def _readable(fd: int) -> bool:
    """Whether `fd` has something to read now (or hung up, or failed).

    poll(), not select(): select() refuses a descriptor from FD_SETSIZE (1024) on, and a process
    holding a thousand parked polls opens its pool's next connections past it. Each check of
    one raised ValueError, which psycopg_pool takes for a failed check: it put the connection
    back (its transaction status looks fine) and slept BROKER_DB_RECONNECT_MS (0.2 s) before
    trying the next, at every checkout that met one, for as long as it lived (/healthz and
    enqueues 0.2-1 s every few requests beside 10 000 parked polls; none at all once every
    connection of the pool was past it).
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def reconnect_every(seconds: float) -> None:
    """Space the pool's reconnect attempts (and its pauses between two failed checks of a
    checkout) `seconds` apart, evenly.

    psycopg_pool retries a lost connection after 1, 2, 4, 8 ... seconds: a primary writable again
    after a 10 s failover waited for the retry at 15 s (12.4 s measured), in every process. Its
    schedule has no parameter but these class constants, which every pool of the process reads.
    """
    from psycopg_pool.base import AttemptWithBackoff

    AttemptWithBackoff.INITIAL_DELAY = seconds
    AttemptWithBackoff.DELAY_BACKOFF = 1.0


class QuietReconnects(logging.Filter):
    """psycopg_pool logs a warning for each failed attempt to reconnect, several a second while
    the database is away: the first passes, then one every EVERY_S, counting the rest."""

    EVERY_S = 10.0

    def __init__(self) -> None:
        super().__init__()
        self._last = -math.inf
        self._quiet = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("error connecting"):
            return True
        now = time.monotonic()
        if now - self._last < self.EVERY_S:
            self._quiet += 1
            return False
        if self._quiet:
            record.msg = f"{record.msg} (and {self._quiet} more failed attempts since the last)"
        self._last, self._quiet = now, 0
        return True


def prepare(databases: dict[str, dict[str, Any]], reconnect_ms: int) -> None:
    """At start-up, before any pool connects: the reconnect spacing (BROKER_DB_RECONNECT_MS),
    and GatedConnection as the connection class of every PostgreSQL pool Django builds.

    Done on a process's first connection, they came too late for a process started while
    PostgreSQL was away: it had no first connection, and its pool retried 1, 2, 4 s apart, ungated
    (a sweeper started just before an outage was back 3.3 s after the database). DATABASES cannot
    name the class itself: settings load before the apps. A process with no PostgreSQL pool (a
    worker host, which reaches the broker by HTTP only) does not import psycopg at all: 0.2 s of
    CPU at each start.
    """
    pooled = []
    for db in databases.values():
        options = db.setdefault("OPTIONS", {})
        if db.get("ENGINE") == "django.db.backends.postgresql" and options.get("pool"):
            pooled.append(options)
    if not pooled:
        return
    from broker.dbgate import GatedConnection

    every_s = reconnect_ms / 1000
    reconnect_every(every_s)
    GatedConnection.every_s = every_s
    for options in pooled:
        if options["pool"] is True:
            options["pool"] = {}
        options["pool"].setdefault("connection_class", GatedConnection)


def tune_pool(sender: Any, connection: Any, **kwargs: Any) -> None:
    """connection_created receiver: with CONN_HEALTH_CHECKS, check_if_disturbed for the pool
    behind `connection`.

    Done on first use, not at start-up: Django builds the pool lazily with its round-trip check
    (and tests swap in their own pool), and passes no other check through. A pool that has not
    connected yet checks with a round trip, which only costs time.
    """
    if connection.vendor != "postgresql" or connection.pool is None:
        return
    if not connection.settings_dict.get("CONN_HEALTH_CHECKS"):
        return
    pool = connection.pool
    # psycopg_pool keeps the check it was built with here; Django offers no setting for another.
    if pool._check is not check_if_disturbed:
        pool._check = check_if_disturbed

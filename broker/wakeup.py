"""Parked long-polls and what wakes them: LISTEN/NOTIFY on PostgreSQL, a light poll on SQLite.

One hub per process. Each parked claim is a `Waiter`: a callback tells gunicorn's parking loop,
or an Event, made when a thread waits, wakes that thread (Hub.wait); a notification for a queue
wakes as many waiters of that queue as it names tasks (FIFO), not all of them, so 200 parked claims
cost one claim query per new task, not 200. One thread per process listens (PostgreSQL) or polls
(SQLite); parked requests never touch the database while they wait. The listening connection is
also this process's word on whether PostgreSQL can be reached (`away`): while it cannot, parked
claims wait quietly for the listener to reconnect, which wakes them all.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from django.db import connection, transaction

log = logging.getLogger(__name__)

CHANNEL = "broker_ready"
# A listener's self-check: "!" cannot start a queue name, so no claimer mistakes it for work.
PING_PREFIX = "!ping:"
PING_EVERY_S = 30.0
PING_DEADLINE_S = 2.0
# How often the listener reads the node's record of a lost connection (broker.dbgate).
LOSS_CHECK_S = 0.2
ANY_QUEUE = "*"
# The poll used where no notification can arrive: SQLite, or PostgreSQL while LISTEN is down.


class Waiter:
    """One parked claim: the parking loop is told by `on_wake`, or a thread waits (Hub.wait).

    `woken` says a wake came since the last take. The Event a thread needs is made only when one
    waits: a claim parked in the loop never does, and ten thousand of them would carry ten
    thousand Events (a Condition, a lock, a deque each) for the garbage collector to walk.
    """

    __slots__ = ("event", "on_wake", "queues", "seq", "woken", "woken_for")

    def __init__(self, queues: frozenset[str] | None) -> None:
        self.woken = False
        self.event: threading.Event | None = None
        self.queues = queues
        self.woken_for: str | None = None
        self.on_wake: Callable[[], None] | None = None
        self.seq = 0  # when it was parked or last woken (the hub's order)

    def signal(self) -> None:
        """Wake it (under the hub's lock)."""
        self.woken = True
        if self.event is not None:
            self.event.set()
        if self.on_wake is not None:
            self.on_wake()


def _wants(queues: frozenset[str] | None, queue: str) -> bool:
    """Whether waiters of `queues` (None: every queue) claim from `queue`."""
    return queues is None or queue == ANY_QUEUE or queue in queues


class Hub:
    """The waiters of this process and the thread that wakes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Waiters grouped by the queues they claim from (None: every queue), each group in the
        # order its waiters last had a wake (`seq`): a wake looks at the head of the groups that
        # want its queue, not at every parked claim, and a poll leaves in O(1). Ten thousand
        # parked polls of one queue made a wake for another scan them all (0.8 ms under the
        # lock) and each poll's end remove itself from a deque of them (0.5 ms).
        self._groups: dict[frozenset[str] | None, dict[Waiter, None]] = {}
        self._seq = 0
        self._count = 0
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._stop = threading.Event()
        self.listening = False
        # The listener lost PostgreSQL and has not reached it again (a restart, a failover).
        self.away = False

    # -- waiters ------------------------------------------------------------------------------

    def park(self, queues: frozenset[str] | None) -> Waiter:
        self._ensure_thread()
        waiter = Waiter(queues)
        with self._lock:
            self._to_back(waiter)
            self._count += 1
        return waiter

    def _to_back(self, waiter: Waiter) -> None:
        self._seq += 1
        waiter.seq = self._seq
        self._groups.setdefault(waiter.queues, {})[waiter] = None

    def take(self, waiter: Waiter) -> str | None:
        """The queue of the wake `waiter` received since its last look (None: none came), handed
        to the caller: `woken` is cleared (and the Event, if a thread waits), and a wake that
        comes later sets it again."""
        with self._lock:
            woken_for, waiter.woken_for = waiter.woken_for, None
            waiter.woken = False
            if waiter.event is not None:
                waiter.event.clear()
        return woken_for

    def wait(self, waiter: Waiter, timeout: float) -> bool:
        """Block this thread until `waiter` is woken (True) or `timeout` seconds pass."""
        with self._lock:
            if waiter.event is None:
                waiter.event = threading.Event()
                if waiter.woken:
                    waiter.event.set()
            event = waiter.event
        return event.wait(timeout)

    def unpark(self, waiter: Waiter, unused: str | None = None) -> None:
        """Remove a waiter. A wake it will not use goes to the next waiter of that queue: `unused`,
        one it took but never claimed on (its client left, its claim raised), and any that came
        after its last look. A NOTIFY is heard once: a wake dropped here strands a ready task."""
        with self._lock:
            group = self._groups.get(waiter.queues)
            if group is not None and group.pop(waiter, False) is None:
                self._count -= 1
                if not group:
                    del self._groups[waiter.queues]
            pending = [q for q in (unused, waiter.woken_for) if q is not None]
            waiter.woken_for = None
        for queue in pending:
            self.wake(queue, 1)

    def wake(self, queue: str, count: int) -> int:
        """Wake up to `count` waiters that claim from `queue`, longest without a wake first;
        returns how many."""
        woken = 0
        with self._lock:
            groups = [group for queues, group in self._groups.items() if _wants(queues, queue)]
            while woken < count and groups:
                first: Waiter | None = None
                for group in list(groups):
                    head = next((w for w in group if not w.woken), None)
                    if head is None:
                        groups.remove(group)  # every one of them already has a wake
                    elif first is None or head.seq < first.seq:
                        first = head
                if first is None:
                    break
                first.woken_for = queue
                first.signal()
                # To the back: the next wake goes to someone who has not just had one.
                del self._groups[first.queues][first]
                self._to_back(first)
                woken += 1
        return woken

    def wake_all(self) -> None:
        with self._lock:
            for group in self._groups.values():
                for waiter in group:
                    waiter.woken_for = ANY_QUEUE
                    waiter.signal()

    def parked(self) -> int:
        with self._lock:
            return self._count

    # -- the thread ---------------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        # After a fork (gunicorn workers) the parent's thread does not exist in the child.
        if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
                return
            self._pid = os.getpid()
            target = self._listen if connection.vendor == "postgresql" else self._poll_forever
            self._thread = threading.Thread(target=target, name="broker-wakeup", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread and close its connection (tests drop their database afterwards)."""
        self._stop.set()
        if self._thread is not None and self._pid == os.getpid():
            self._thread.join(timeout)
        self._thread = None
        self._stop = threading.Event()
        self.listening = self.away = False

    def _poll_forever(self) -> None:
        stop = self._stop
        from contract.conf import broker_settings

        interval = broker_settings.BROKER_SQLITE_POLL_MS / 1000
        while not stop.wait(interval):
            self._poll_once()

    def _poll_once(self) -> None:
        from broker.models import Task

        if not self.parked():
            return
        try:
            ready = Task.objects.ready().values_list("queue", flat=True)[:256]
            queues = list(ready)
        except Exception:
            queues = []
        finally:
            connection.close()
        for queue in queues:
            self.wake(queue, 1)

    def _listen(self) -> None:
        import psycopg

        from broker import dbgate
        from contract.conf import broker_settings

        conninfo, params = listen_conninfo()
        stop = self._stop
        deaf_backoff = 0.1
        lost_at = 0.0
        # What a renewal replaces (below), open until its successor listens: (connection, server).
        old: tuple[Any, int] | None = None
        while not stop.is_set():
            conn = None
            try:
                conn = psycopg.connect(conninfo, **params, autocommit=True)
                conn.execute(f"LISTEN {CHANNEL}")
                connected_at, server = time.monotonic(), dbgate.server_key(conn)
                if self.away or old is not None:
                    log.warning("wake-up listener reconnected after %.1f s",
                                time.monotonic() - lost_at)  # fmt: skip
                self.away = False
                token = self._ping(conn)
                self.listening = True
                deaf_backoff = 0.1
                # Anything sent while we were not listening is lost: let everyone look. Not
                # when the connection renewed heard our ping too: it missed nothing meanwhile.
                if old is None or not (old[1] == server and self._heard(old[0], token, 0.5)):
                    self.wake_all()
                _close(old)
                old = None
                next_ping = time.monotonic() + PING_EVERY_S
                while not stop.is_set():
                    for note in conn.notifies(timeout=LOSS_CHECK_S):
                        self._on_notify(note.payload)
                    if dbgate.lost_since(connected_at, server):
                        # A vanished host tells an idle LISTEN nothing until its keepalives
                        # give up (11 s); meanwhile writes come back on the next host, their
                        # NOTIFYs unheard. So reconnect now, listening on this one until then,
                        # and say the database away only if that fails: a backend lost on a
                        # healthy server costs one connection, no 503 and no wake.
                        log.warning("wake-up listener: this node lost a connection to its "
                                    "server; reconnecting")  # fmt: skip
                        lost_at, old, conn = time.monotonic(), (conn, server), None
                        break
                    if time.monotonic() >= next_ping:
                        self._ping(conn)
                        next_ping = time.monotonic() + PING_EVERY_S
            except ListenerDeafError as exc:
                self.listening = False
                if stop.is_set():
                    break
                # Connected but deaf (a transaction-mode pooler): parked claims poll meanwhile.
                log.warning("%s; retrying", exc)
                stop.wait(deaf_backoff)
                deaf_backoff = min(deaf_backoff * 2, 2.0)
            except Exception as exc:
                self.listening = False
                if stop.is_set():
                    break
                if not self.away:
                    log.warning("wake-up listener lost its connection (%s); reconnecting", exc)
                    lost_at = time.monotonic() if old is None else lost_at
                    self.away = True
                _close(old)
                old = None
                # As often as the pool reconnects (BROKER_DB_RECONNECT_MS): the primary back, the
                # parked claims hear of it within that.
                stop.wait(broker_settings.BROKER_DB_RECONNECT_MS / 1000)
            finally:
                if conn is not None:
                    conn.close()
        _close(old)
        self.listening = False

    def _ping(self, conn: Any) -> str:
        """NOTIFY ourselves and wait for the echo: a LISTEN that hears nothing (say, behind a
        transaction-mode pooler) must count as not listening, so parked claims poll instead.
        The NOTIFY's payload, which every listener of the server hears."""
        token = f"{PING_PREFIX}{uuid.uuid4().hex}"
        conn.execute("SELECT pg_notify(%s, %s)", [CHANNEL, token])
        if self._heard(conn, token, PING_DEADLINE_S):
            return token
        raise ListenerDeafError(
            "LISTEN did not hear its own NOTIFY: behind PgBouncer in transaction mode, set "
            "BROKER_LISTEN_DATABASE_URL to a direct or session-mode connection"
        )

    def _heard(self, conn: Any, token: str, within_s: float) -> bool:
        """Whether `conn` hears `token` within `within_s`; what it hears before is passed on. Only
        reads: a connection to a vanished host answers False, not after its TCP timeout."""
        import psycopg

        deadline = time.monotonic() + within_s
        try:
            while (left := deadline - time.monotonic()) > 0:
                for note in conn.notifies(timeout=left, stop_after=1):
                    if note.payload == token:
                        return True
                    self._on_notify(note.payload)
        except psycopg.Error:
            return False
        return False

    def _on_notify(self, payload: str) -> None:
        if payload.startswith(PING_PREFIX):
            return
        queue, _, count = payload.rpartition(":")
        self.wake(queue or ANY_QUEUE, int(count) if count.isdigit() else 1)


def _close(old: tuple[Any, int] | None) -> None:
    """Close the connection a renewal replaced, if any."""
    if old is not None:
        old[0].close()


def listen_conninfo() -> tuple[str, dict[str, Any]]:
    """Where the LISTEN connection goes: (conninfo, keyword parameters) for psycopg.connect."""
    from psycopg.conninfo import conninfo_to_dict

    from contract.conf import broker_settings

    # LISTEN needs a session: behind a transaction-mode pooler, a direct URL of its own, with the
    # same defaults as DATABASE_URL's for a server that vanishes (BROKER_DB_TCP_OPTIONS).
    conninfo = broker_settings.BROKER_LISTEN_DATABASE_URL or ""
    if conninfo:
        given = conninfo_to_dict(conninfo)
        tcp = broker_settings.BROKER_DB_TCP_OPTIONS.items()
        return conninfo, {key: value for key, value in tcp if key not in given}
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    return "", params


class ListenerDeafError(RuntimeError):
    """The LISTEN connection does not receive notifications."""


hub = Hub()


def announce(queue_counts: dict[str, int]) -> None:
    """Tell every broker process that tasks became ready, once the current transaction commits.

    On PostgreSQL a NOTIFY issued inside a transaction is delivered at commit and dropped on
    rollback, which is exactly the promise; on SQLite only this process can be told.
    """
    if not queue_counts:
        return
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for queue, count in queue_counts.items():
                cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, f"{queue}:{count}"])
    else:
        items = list(queue_counts.items())
        transaction.on_commit(lambda: [hub.wake(q, n) for q, n in items])

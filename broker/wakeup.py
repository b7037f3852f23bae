"""Parked long-polls and what wakes them: LISTEN/NOTIFY on PostgreSQL, a light poll on SQLite.

One hub per process. Each parked claim is a `Waiter` with its own Event; a notification for a queue
wakes as many waiters of that queue as it names tasks (FIFO), not all of them, so 200 parked claims
cost one claim query per new task, not 200. One thread per process listens (PostgreSQL) or polls
(SQLite, or PostgreSQL while the listening connection is down); parked requests never touch the
database while they wait.
"""
from __future__ import annotations

import logging
import os
import threading
from collections import deque

from django.db import connection, transaction

log = logging.getLogger(__name__)

CHANNEL = "broker_ready"
ANY_QUEUE = "*"
# The poll used where no notification can arrive: SQLite, or PostgreSQL while LISTEN is down.
POLL_INTERVAL_S = 0.05


class Waiter:
    """One parked claim."""

    __slots__ = ("event", "queues", "woken_for")

    def __init__(self, queues: frozenset[str] | None) -> None:
        self.event = threading.Event()
        self.queues = queues
        self.woken_for: str | None = None

    def wants(self, queue: str) -> bool:
        return self.queues is None or queue == ANY_QUEUE or queue in self.queues


class Hub:
    """The waiters of this process and the thread that wakes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: deque[Waiter] = deque()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._stop = threading.Event()
        self.listening = False

    # -- waiters ------------------------------------------------------------------------------

    def park(self, queues: frozenset[str] | None) -> Waiter:
        self._ensure_thread()
        waiter = Waiter(queues)
        with self._lock:
            self._waiters.append(waiter)
        return waiter

    def unpark(self, waiter: Waiter) -> None:
        """Remove a waiter; a wake it received but did not use goes to the next one."""
        with self._lock:
            try:
                self._waiters.remove(waiter)
            except ValueError:
                pass
        if waiter.event.is_set() and waiter.woken_for is not None:
            self.wake(waiter.woken_for, 1)

    def wake(self, queue: str, count: int) -> int:
        """Wake up to `count` waiters that claim from `queue`; returns how many."""
        woken = 0
        with self._lock:
            for waiter in list(self._waiters):
                if woken >= count:
                    break
                if not waiter.event.is_set() and waiter.wants(queue):
                    waiter.woken_for = queue
                    waiter.event.set()
                    # To the back: the next wake goes to someone who has not just had one.
                    self._waiters.remove(waiter)
                    self._waiters.append(waiter)
                    woken += 1
        return woken

    def wake_all(self) -> None:
        with self._lock:
            for waiter in self._waiters:
                waiter.woken_for = ANY_QUEUE
                waiter.event.set()

    def parked(self) -> int:
        with self._lock:
            return len(self._waiters)

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
        self.listening = False

    def _poll_forever(self) -> None:
        stop = self._stop
        while not stop.wait(POLL_INTERVAL_S):
            self._poll_once()

    def _poll_once(self) -> None:
        from broker.models import Task

        if not self.parked():
            return
        try:
            ready = Task.objects.ready().values_list("queue", flat=True)[:256]
            queues = list(ready)
        except Exception:  # noqa: BLE001 -- the database may be away; the next tick retries
            queues = []
        finally:
            connection.close()
        for queue in queues:
            self.wake(queue, 1)

    def _listen(self) -> None:
        import psycopg

        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        stop = self._stop
        backoff = 0.1
        while not stop.is_set():
            try:
                with psycopg.connect(**params, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening = True
                    backoff = 0.1
                    # Anything sent while we were not listening is lost: let everyone look.
                    self.wake_all()
                    while not stop.is_set():
                        for note in conn.notifies(timeout=1.0):
                            self._on_notify(note.payload)
            except Exception as exc:  # noqa: BLE001 -- reconnect whatever went wrong
                self.listening = False
                if stop.is_set():
                    break
                log.warning("wake-up listener lost its connection (%s); retrying", exc)
                self._poll_once()
                stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
        self.listening = False

    def _on_notify(self, payload: str) -> None:
        queue, _, count = payload.rpartition(":")
        self.wake(queue or ANY_QUEUE, int(count) if count.isdigit() else 1)


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

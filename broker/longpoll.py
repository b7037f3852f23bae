"""A claim that waits: park without a database connection until woken, the wait ends, or the
client goes away (a client that left is never handed a task: it would burn an attempt). An outage
of the database is waited out quietly, like an empty queue.

Served by gunicorn's parking worker (the request carries a `broker.parking.loop.Slot`), a parked
claim holds no thread: it waits in the process's parking loop and each wake-up serves the request
again (`_claim_parked`). Anywhere else (the test client, runserver) its thread waits on an Event.
"""

from __future__ import annotations

import math
import select
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError, connection

from broker import queue
from broker.claimers import claim_log
from broker.parking.loop import ENVIRON_KEY, Parked, Slot
from broker.queue import Delivery
from broker.queue.base import QueuePatterns
from broker.wakeup import ANY_QUEUE, Waiter, hub
from contract.conf import broker_settings

# How often a parked claim looks at its socket; a syscall, no database work.
GONE_CHECK_S = 0.5
# How often a parked claim polls the database itself while the hub's listener is deaf.
DEGRADED_POLL_S = 0.25
# A claim woken for its queue that finds nothing looks once more this much later. Most often
# another claimer took the task; but a transaction that waited for the task's row lock and then
# found the row no longer matched (a second requeue of one dead task, a settle racing a release)
# holds that lock until it ends, and a claim's SKIP LOCKED passes the row by: the wake would be
# spent and the task left ready beside parked claimers.
RELOOK_S = 0.05
# What a claim meets while PostgreSQL cannot be reached: a broken connection, or none to be had
# from the pool within BROKER_DB_POOL_TIMEOUT.
AWAY_ERRORS = (OperationalError, InterfaceError)


# The peer shut its sending side (FIN): Linux reports it even with unread bytes queued before it.
_POLLRDHUP = getattr(select, "POLLRDHUP", 0)
_GONE_EVENTS = _POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL if _POLLRDHUP else 0


def socket_gone(sock: socket.socket | None) -> Callable[[], bool]:
    """A check that tells whether the client closed its end of `sock` (False if unknowable).

    It looks at the TCP connection under any TLS layer (gunicorn's certfile/keyfile give an
    SSLSocket, whose recv() refuses peek flags) and never reads from the stream.
    """
    if sock is None:
        return lambda: False
    if _GONE_EVENTS:
        # poll() on the descriptor: unlike a peek, it also sees a FIN queued behind bytes, like
        # the close_notify record a TLS client (Go, curl) sends just before it hangs up.
        poller = select.poll()
        fd = sock.fileno()
        if fd < 0:  # already closed
            return lambda: True
        poller.register(fd, _GONE_EVENTS)

        def gone_by_poll() -> bool:
            try:
                return bool(poller.poll(0))
            except OSError:
                return True

        return gone_by_poll

    def gone_by_peek() -> bool:
        try:
            # socket.socket's own recv, on the raw descriptor even for an SSLSocket.
            return socket.socket.recv(sock, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    return gone_by_peek


def parking_of(meta: Mapping[str, Any]) -> Slot | None:
    """The request's parking slot (request.META), if its server parks claims without a thread."""
    slot = meta.get(ENVIRON_KEY)
    return slot if isinstance(slot, Slot) else None


def once(parking: Slot | None, key: str, work: Callable[[], Any]) -> Any:
    """`work()`, done on a parked request's first dispatch only (its answer kept for the next)."""
    return work() if parking is None else parking.once(key, work)


def _look_again_at(got: list[Delivery], woken: str | None) -> float:
    """The monotonic time to claim again without a wake-up (infinity: only when woken), after
    a look that found nothing: a rate limit's next token, or RELOOK_S after a fruitless wake."""
    retry_in: float | None = getattr(got, "retry_in", None)
    if woken is not None and woken != ANY_QUEUE:
        retry_in = RELOOK_S if retry_in is None else min(retry_in, RELOOK_S)
    return math.inf if retry_in is None else time.monotonic() + retry_in


def _look_again_after_failure(held: str | None) -> float:
    """The monotonic time to claim again without a wake-up after a look that failed (the
    database unreachable from this process while its listener still hears: say, its pool
    renewing the connections a vanished host took), holding the wake `held`.

    A claim woken for its queue looks again as often as the pool reconnects: that wake was its
    task's only word, and waiting for the next left the task ready beside it until its wait
    ended. Not one woken for every queue (the listener's reconnection wakes every parked claim):
    each parked claim of the process would go back to a pool with nothing to give, again and
    again; the end of its wait looks once more.
    """
    if held is None or held == ANY_QUEUE:
        return math.inf
    return time.monotonic() + broker_settings.BROKER_DB_RECONNECT_MS / 1000


# The queues a claim takes from: names, patterns (an access token's grants), or every queue.
Scope = list[str] | QueuePatterns | None
Looked = tuple[list[Delivery], DatabaseError | None]


def _look(queues: Scope, lease_ms: int, limit: int, worker: str | None) -> Looked:
    """Claim, or the error that says PostgreSQL cannot be reached (a restart, a failover): a
    parked claim waits that out. Any other error, or one inside a caller's transaction, raises."""
    try:
        return queue.claim(queues, lease_ms, limit, worker), None
    except AWAY_ERRORS as exc:
        if connection.in_atomic_block:
            raise
        return [], exc


def claim_wait(
    queues: Scope,
    *,
    lease_ms: int,
    wait_ms: int,
    limit: int = 1,
    worker: str | None = None,
    gone: Callable[[], bool] = lambda: False,
    parking: Slot | None = None,
) -> list[Delivery]:
    """Claim up to `limit` tasks, waiting up to `wait_ms` for the first to become ready.

    With `parking`, a claim that must wait raises `Parked` instead of blocking its thread, and
    the request's next dispatch goes on from where it parked.

    While PostgreSQL cannot be reached the claim waits quietly (the hub wakes it when its
    listener is back) and answers like any other at the end of its wait; it raises the database
    error (a 503) only when the database is still away then.
    """
    if isinstance(queues, list):
        queues = list(dict.fromkeys(queues))  # `a,a` is `a`: a queue named twice is taken once
    if parking is not None and isinstance(parking.wait, _Wait):
        return _claim_parked(parking, parking.wait, False, queues, lease_ms, limit, worker, gone)
    deadline = time.monotonic() + wait_ms / 1000
    if gone():
        return []
    # For `waiting`'s no_workers: a statement at most once a second. A token's patterns are
    # noted as such (broker.claimers.workers_seen matches them).
    claim_log.seen(list(queues.globs) if isinstance(queues, QueuePatterns) else queues)
    if parking is not None and wait_ms > 0:
        # Park first, then look once: a task made ready before the look is found by it, one
        # after wakes the parked claim. One claim query to open an idle poll, not two; parking
        # in the hub costs microseconds. While the database is away, no look (as below).
        waiter = _park(queues)
        wait = _Wait(waiter, deadline, _away() if hub.away else None)
        return _claim_parked(parking, wait, True, queues, lease_ms, limit, worker, gone)
    # A busy queue answers at once, without the bookkeeping of parking. Not while the listener
    # knows the database is away: a look would wait BROKER_DB_POOL_TIMEOUT for a connection.
    got, lost = ([], _away()) if hub.away else _look(queues, lease_ms, limit, worker)
    if got or wait_ms <= 0:
        if lost is not None:
            raise lost
        return got
    # Park, then look again before waiting: a task that became ready between the first look and
    # the park has already sent its wake-up, which only a parked claim would have heard.
    waiter = _park(queues)
    # A wake taken but not yet looked at by a claim that completed: if we leave before (client
    # gone, claim raised), unpark passes it to the next claimer, or its task would sit ready.
    held: str | None = None
    try:
        while True:
            # A wake held through a look that failed is still owed a look.
            held = woken = hub.take(waiter) or held
            if gone():
                return []
            looked = failed = False
            if not hub.away:
                got, lost = _look(queues, lease_ms, limit, worker)
                if lost is None:
                    held = None  # the claim looked: whatever the wake announced, it was seen
                    looked = True
                failed = not looked
                if got:
                    return got
            look_again = (
                _look_again_after_failure(held) if failed
                else _look_again_at(got, woken if looked else None)
            )  # fmt: skip
            _let_go()
            while True:
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0:
                    return _last_look(queues, lease_ms, limit, worker, lost)
                if now >= look_again:
                    break  # a rate limit's next token: no wake-up announces one
                # Deaf: poll. Away: the listener's reconnection wakes every parked claim.
                deaf = _deaf()
                tick = DEGRADED_POLL_S if deaf else GONE_CHECK_S
                if hub.wait(waiter, min(remaining, tick, max(look_again - now, 0))):
                    break
                if gone():
                    return []
                if deaf:
                    break
    finally:
        hub.unpark(waiter, held)


class _Wait:
    """A parked claim between dispatches of its request (Slot.wait)."""

    __slots__ = ("deadline", "held", "lost", "waiter")

    def __init__(self, waiter: Waiter, deadline: float, lost: DatabaseError | None) -> None:
        self.waiter = waiter
        self.deadline = deadline
        self.lost = lost
        # A wake taken but not looked at (as in claim_wait's loop): passed on if the poll ends.
        self.held: str | None = None

    def release(self) -> None:
        hub.unpark(self.waiter, self.held)


def _claim_parked(
    slot: Slot,
    wait: _Wait,
    first: bool,
    queues: Scope,
    lease_ms: int,
    limit: int,
    worker: str | None,
    gone: Callable[[], bool],
) -> list[Delivery]:
    """One dispatch of a claim parked in the loop: claim_wait's loop, with `raise Parked` where
    that waits on the Event. `first`: right after hub.park (look, whatever woke it)."""
    slot.wait = None  # owned by this dispatch until it parks again
    parked = False
    try:
        while True:
            # A wake held through a look that failed is still owed a look.
            woken = wait.held = hub.take(wait.waiter) or wait.held
            if gone():
                return []
            if not first and woken is None and time.monotonic() >= wait.deadline:
                return _last_look(queues, lease_ms, limit, worker, wait.lost)
            first = False
            got: list[Delivery] = []
            looked = failed = False
            if not hub.away:
                got, wait.lost = _look(queues, lease_ms, limit, worker)
                if wait.lost is None:
                    wait.held = None
                    looked = True
                failed = not looked
                if got:
                    return got
            look_again = (
                _look_again_after_failure(wait.held) if failed
                else _look_again_at(got, woken if looked else None)
            )  # fmt: skip
            _let_go()
            now = time.monotonic()
            if now >= wait.deadline:
                return _last_look(queues, lease_ms, limit, worker, wait.lost)
            if now >= look_again:
                continue
            deaf = _deaf()
            due = min(wait.deadline, look_again, now + DEGRADED_POLL_S if deaf else math.inf)
            slot.wait = wait
            parked = True
            raise Parked(due)
    finally:
        if not parked:
            wait.release()


def _park(queues: list[str] | QueuePatterns | None) -> Waiter:
    # Patterns (a token's claim naming no queue): woken by any queue, as a claim of all is.
    return hub.park(frozenset(queues) if isinstance(queues, list) and queues else None)


def _let_go() -> None:
    """Give the connection back (to the pool on PostgreSQL) for the whole wait; not when a
    caller's transaction holds it (tests, transactional callers)."""
    if not connection.in_atomic_block:
        connection.close()


def _deaf() -> bool:
    """Connected but deaf (behind a transaction-mode pooler): parked claims poll the database."""
    return connection.vendor == "postgresql" and not hub.listening and not hub.away


def _last_look(
    queues: Scope,
    lease_ms: int,
    limit: int,
    worker: str | None,
    lost: DatabaseError | None,
) -> list[Delivery]:
    """The wait is over: nothing (204), unless the database is still away (raise: a 503). A last
    look that failed is tried once more now that it is back."""
    if hub.away:
        raise lost or _away()
    if lost is None:
        return []
    got, lost = _look(queues, lease_ms, limit, worker)
    if lost is not None:
        raise lost
    return got


def _away() -> DatabaseError:
    return OperationalError("the database cannot be reached (the wake-up listener lost it)")

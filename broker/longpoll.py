"""A claim that waits: park without a database connection until woken, the wait ends, or the
client goes away (a client that left is never handed a task: it would burn an attempt)."""

from __future__ import annotations

import math
import select
import socket
import time
from collections.abc import Callable

from django.db import connection

from broker import queue
from broker.claimers import claim_log
from broker.queue import Delivery
from broker.wakeup import hub

# How often a parked claim looks at its socket; a syscall, no database work.
GONE_CHECK_S = 0.5
# How often a parked claim polls the database itself while the hub cannot listen.
DEGRADED_POLL_S = 0.25


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


def _look_again_at(retry_in: float | None) -> float:
    """The monotonic time to claim again without a wake-up (infinity: only when woken)."""
    return math.inf if retry_in is None else time.monotonic() + retry_in


def claim_wait(
    queues: list[str] | None,
    *,
    lease_ms: int,
    wait_ms: int,
    limit: int = 1,
    worker: str | None = None,
    gone: Callable[[], bool] = lambda: False,
) -> list[Delivery]:
    """Claim up to `limit` tasks, waiting up to `wait_ms` for the first to become ready."""
    deadline = time.monotonic() + wait_ms / 1000
    if gone():
        return []
    claim_log.seen(queues)  # for `waiting`'s no_workers: memory only, written once a second
    # A busy queue answers at once, without the bookkeeping of parking.
    got = queue.claim(queues, lease_ms, limit, worker)
    if got or wait_ms <= 0:
        return got
    # Park, then look again before waiting: a task that became ready between the first look and
    # the park has already sent its wake-up, which only a parked claim would have heard.
    waiter = hub.park(frozenset(queues) if queues else None)
    # A wake taken but not yet looked at by a claim that completed: if we leave before (client
    # gone, claim raised), unpark passes it to the next claimer, or its task would sit ready.
    held: str | None = None
    try:
        while True:
            held = hub.take(waiter)
            if gone():
                return []
            got = queue.claim(queues, lease_ms, limit, worker)
            held = None  # the claim looked: whatever the wake announced, it was seen
            if got:
                return got
            look_again = _look_again_at(getattr(got, "retry_in", None))
            # Give the connection back (to the pool on PostgreSQL) for the whole wait; not when a
            # caller's transaction holds it (tests, transactional callers).
            if not connection.in_atomic_block:
                connection.close()
            while True:
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0:
                    return []
                if now >= look_again:
                    break  # a rate limit's next token: no wake-up announces one
                tick = (
                    GONE_CHECK_S
                    if hub.listening or connection.vendor != "postgresql"
                    else (DEGRADED_POLL_S)
                )
                if waiter.event.wait(min(remaining, tick, max(look_again - now, 0))):
                    break
                if gone():
                    return []
                if connection.vendor == "postgresql" and not hub.listening:
                    break
    finally:
        hub.unpark(waiter, held)

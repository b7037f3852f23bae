"""Parked long-polls without a thread each: one loop per process holds them in an epoll set.

A claim that must wait (broker/longpoll.py) raises `Parked` once it is registered with the
wake-up hub: the request unwinds, its thread goes back to gunicorn's pool, and the connection
goes to this loop (broker/parking/worker.py). The loop watches the socket for a hang-up and
a timer for the poll's next look (its deadline, a rate limit's next token, a deaf listener's
tick); the hub's wake-up takes the poll out of the loop itself. Woken or due, the poll is handed
back to a thread, which serves the same request again from the start and finds the parked claim
in `Slot.wait`: it looks, answers, or parks again. Its body is not kept (an SQS receive may be
3 MiB): what the claim needs of it, its view kept in `Slot.memo` on the first dispatch. A
parked poll costs a socket, an epoll entry and a few small objects; a client that hangs up is
dropped here, its wake passed on, and is never handed a task.

Nothing here imports Django: gunicorn loads the worker class before Django is set up.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)

# The request's key for its Slot in the WSGI environ (absent: no parking loop; threads wait).
ENVIRON_KEY = "broker.parking"
# A hang-up (FIN, RST, an error); never EPOLLIN: bytes a client pipelines must not spin the loop.
_HANGUP = select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR
# Longest sleep of the loop with nothing due: it only bounds how late a stop is noticed.
_IDLE_S = 1.0
# How soon the loop looks again at polls left due while the request threads were busy.
_BUSY_RETRY_S = 0.005
# Due polls (their wait ended, or a timed look) being served at once, per process.
DUE_AT_ONCE = 4


class Parked(BaseException):
    """Unwinds a request whose claim waits in the parking loop, its thread freed.

    A BaseException so that no layer between the claim and the worker (DRF's exception handler,
    Django's, the SQS endpoint's catch-all) turns it into an answer.
    """

    def __init__(self, due: float) -> None:
        super().__init__(due)
        self.due = due  # time.monotonic() at which the poll looks again unless woken before


class Wait(Protocol):
    """A claim's parked state, kept across the request's dispatches (broker/longpoll.py)."""

    waiter: Any  # the hub's Waiter: its `on_wake` is set by the loop

    def release(self) -> None:
        """Leave the hub, passing on any wake not used (the client left, the claim failed)."""


class Slot:
    """What the parking worker puts in a request's environ; it outlives one dispatch.

    A request that parks keeps no body: its later dispatches read an empty one (Content-Length
    0). So a view that may park reads what it needs of its body on the first dispatch and keeps
    it through `once` (the claim's parameters, not the body), and knows a later dispatch by
    `resumed`.
    """

    __slots__ = ("memo", "wait")

    def __init__(self) -> None:
        self.wait: Wait | None = None
        # Work done before the claim that must not be done again on a later dispatch (the acks
        # of POST /jobs/claim), and what a later one needs of the body: its answer, by name.
        self.memo: dict[str, Any] = {}

    @property
    def resumed(self) -> bool:
        """Whether this dispatch serves a parked claim again (woken, or its wait over)."""
        return self.wait is not None

    def once(self, key: str, work: Callable[[], Any]) -> Any:
        if key not in self.memo:
            self.memo[key] = work()
        return self.memo[key]

    def release(self) -> None:
        wait, self.wait = self.wait, None
        if wait is not None:
            wait.release()


class ParkedPoll:
    """A request parked in the loop: what a thread needs to serve it again."""

    __slots__ = ("conn", "counted", "due", "environ", "fd", "keepalive", "req", "slot", "started")

    def __init__(
        self, conn: Any, req: Any, environ: dict[str, Any], slot: Slot, started: Any, due: float
    ) -> None:
        self.conn = conn
        self.req = req
        self.environ = environ
        self.slot = slot
        self.started = started
        self.due = due
        self.keepalive = True
        self.counted = False  # served as a due poll: ParkingLoop.served counts it off
        self.fd = conn.sock.fileno()


class ParkingLoop:
    """The loop of one worker process: an epoll set of parked sockets, a heap of their timers.

    `resume(poll)` hands a woken or due poll to a thread (called on the loop's thread, or on the
    hub's for a wake); `drop(poll)` closes one whose client hung up. Neither may block.
    """

    def __init__(
        self,
        resume: Callable[[ParkedPoll], None],
        drop: Callable[[ParkedPoll], None],
        busy: Callable[[], bool] = lambda: False,
    ) -> None:
        self._resume = resume
        self._drop = drop
        # Polls that are merely due (their wait ended, most often) go to the threads a few at a
        # time (DUE_AT_ONCE), and not while requests queue for a thread: a burst of them (polls
        # opened together end together) must not queue ahead of wakes, health checks and
        # producers, nor crowd them off the GIL. Woken polls are not held back.
        self._busy = busy
        self._due_running = 0
        self._epoll = select.epoll()
        self._signal_r, self._signal_w = os.pipe()
        os.set_blocking(self._signal_r, False)
        os.set_blocking(self._signal_w, False)
        self._epoll.register(self._signal_r, select.EPOLLIN)
        self._incoming: deque[ParkedPoll] = deque()
        # Guards _parked: a poll leaves it once, to whichever comes first of its wake (the hub's
        # thread), its hang-up or its timer (this loop's).
        self._lock = threading.Lock()
        self._parked: dict[int, ParkedPoll] = {}
        self._timers: list[tuple[float, int, ParkedPoll]] = []
        self._seq = itertools.count()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="broker-parking", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._signal()

    def __len__(self) -> int:
        return len(self._parked) + len(self._incoming)

    # -- from other threads -------------------------------------------------------------------

    def add(self, poll: ParkedPoll) -> None:
        """Park `poll` (a request thread, after `Parked` unwound it)."""
        self._incoming.append(poll)
        self._signal()

    def _on_wake(self, poll: ParkedPoll) -> None:
        # Called by the hub's thread under the hub's lock: straight to a request thread, without
        # a hop through this loop's thread (one GIL hand-off less on the way to the claim).
        if self._take(poll):
            self._resume(poll)

    def _signal(self) -> None:
        try:
            os.write(self._signal_w, b"\0")
        except BlockingIOError:  # the pipe is full: the loop is awake and will drain anyway
            pass

    # -- the loop's thread --------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop:
            timeout = _IDLE_S
            if self._timers:
                timeout = min(max(self._timers[0][0] - time.monotonic(), _BUSY_RETRY_S), _IDLE_S)
            try:
                events = self._epoll.poll(timeout)
            except InterruptedError:
                continue
            try:
                self._dispatch(events)
            except Exception:  # one bad poll must not stop the loop that holds every other
                log.exception("parking loop")

    def _dispatch(self, events: list[tuple[int, int]]) -> None:
        for fd, _mask in events:
            if fd == self._signal_r:
                try:
                    while os.read(self._signal_r, 4096):
                        pass
                except BlockingIOError:
                    pass
                continue
            poll = self._parked.get(fd)
            if poll is not None and self._take(poll):
                poll.slot.release()
                self._drop(poll)
        while self._incoming:
            self._park(self._incoming.popleft())
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            if self._due_running >= DUE_AT_ONCE or self._busy():
                break
            due, _, poll = heapq.heappop(self._timers)
            if poll.due == due and self._take(poll):
                with self._lock:
                    self._due_running += 1
                poll.counted = True
                self._resume(poll)

    def served(self, poll: ParkedPoll) -> None:
        """A request thread is done with a dispatch of `poll` (answered, parked again, or gone)."""
        if poll.counted:
            poll.counted = False
            with self._lock:
                held_back = self._due_running >= DUE_AT_ONCE
                self._due_running -= 1
            if held_back:  # else the loop is not waiting on this (a syscall, and the GIL, saved)
                self._signal()

    def _park(self, poll: ParkedPoll) -> None:
        wait = poll.slot.wait
        if wait is None:  # cannot happen: Parked is raised with the wait kept
            self._drop(poll)
            return
        with self._lock:
            try:
                self._epoll.register(poll.fd, _HANGUP)
            except OSError:  # closed meanwhile
                registered = False
            else:
                registered = True
                self._parked[poll.fd] = poll
        if not registered:
            poll.slot.release()
            self._drop(poll)
            return
        heapq.heappush(self._timers, (poll.due, next(self._seq), poll))
        wait.waiter.on_wake = lambda: self._on_wake(poll)
        # A wake that came while the request unwound marked it woken before on_wake was there.
        if wait.waiter.woken and self._take(poll):
            self._resume(poll)

    def _take(self, poll: ParkedPoll) -> bool:
        """Out of the loop, if still in it: True for the one caller that takes it."""
        with self._lock:
            if self._parked.get(poll.fd) is not poll:
                return False
            del self._parked[poll.fd]
            try:
                self._epoll.unregister(poll.fd)
            except OSError:
                pass
            return True

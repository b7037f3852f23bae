"""Prefetch mode: two pumps claim ahead for a pool of threads and settle with their next claim."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from workers.client import backoff_s
from workers.heartbeat import Heartbeat
from workers.outcomes import Outcome, report, split
from workers.wire import MAX_CLAIM, MAX_SETTLES, Broker, BrokerError, Delivery

log = logging.getLogger("workers.runner")

PUMPS = 2
# runworker's default: tasks held per thread at most (chosen by the peers benchmark, README).
DEFAULT_PREFETCH = 64


class Prefetcher:
    """Holds up to concurrency x prefetch tasks (the limit) and runs them on concurrency threads.

    The tasks waiting their turn are bounded by time too: no more than the threads start within
    ahead_s at the recent task duration (one per thread until it is measured). Quick tasks get
    the whole limit, long ones about one each: a worker never hoards long tasks that others
    could run, and a graceful stop, which runs what is held, ends about ahead_s after the
    running tasks.

    Worker threads only run tasks. Two pump threads talk to the broker: a pump claims once half
    the limit is free (or a thread has nothing to start), and every outcome finished by then
    rides along (POST /jobs/claim with acks and nacks: one round trip). An outcome waits at most
    linger_s for such a claim; then a pump sends it anyway. Only one pump at a time may park in
    a long poll, so the other is always free to settle: a worker parked with nothing to do has
    already sent every ack.

    A claim that carries settles waits at most settle_wait_ms and is never cut: its settles are
    committed before it parks, and an answer cut short would leave them unknown.
    Prefetched leases are extended by the heartbeat from their arrival until their task ends.
    """

    def __init__(
        self,
        client: Broker,
        run: Callable[[Delivery], Outcome],
        heartbeat: Heartbeat,
        *,
        concurrency: int,
        prefetch: int,
        wait_ms: int,
        lease_ms: int,
        queues: Sequence[str] = (),
        linger_s: float = 0.005,
        settle_wait_ms: int = 500,
        ahead_s: float = 1.0,
        error_backoff_s: float = 1.0,
    ) -> None:
        """run(delivery) runs one task (its lease already held by heartbeat) and never raises."""
        self._client = client
        self._run = run
        self._heartbeat = heartbeat
        self._concurrency = concurrency
        self._most = concurrency * prefetch
        self._ahead_s = ahead_s
        self._task_s: float | None = None  # moving average of a task's run time
        self._wait_ms = wait_ms
        self._settle_wait_ms = min(wait_ms, settle_wait_ms)
        self._lease_ms = lease_ms
        self._queues = tuple(queues)
        self._linger_s = linger_s
        self._error_backoff_s = error_backoff_s
        lock = threading.Lock()
        self._lock = lock
        self._tasks = threading.Condition(lock)  # worker threads wait here for tasks
        self._pumps = threading.Condition(lock)  # pumps wait here for something to send
        self._ready: deque[Delivery] = deque()  # claimed, not started
        self._running = 0
        self._reserved = 0  # the max of claims in flight: tasks that may arrive
        self._outbox: list[Outcome] = []
        self._oldest = 0.0  # when the oldest outcome in the outbox was queued
        self._parked = 0  # pumps in a claim that may wait for work
        self._answered = 0.0  # when a claim last brought tasks
        self._claim_after = 0.0  # after a refused claim, no claim before this
        self._failures = 0
        self._stopping = False

    def threads(self) -> list[threading.Thread]:
        """The threads to start: the pumps and the worker threads."""
        pumps = [
            threading.Thread(target=self._pump, name=f"pump-{n}", daemon=True)
            for n in range(1, PUMPS + 1)
        ]
        return pumps + [
            threading.Thread(target=self._serve, name=f"worker-{n}", daemon=True)
            for n in range(1, self._concurrency + 1)
        ]

    def stop(self) -> None:
        """Claim no more; run what is in hand, settle everything, then the threads end."""
        with self._lock:
            self._stopping = True
            self._tasks.notify_all()
            self._pumps.notify_all()

    # -- worker threads -------------------------------------------------------------------

    def _serve(self) -> None:
        """Run tasks as they come; end once stopping with nothing left to come."""
        while True:
            with self._lock:
                while not self._ready:
                    if self._stopping and not self._reserved:
                        return
                    self._tasks.wait()
                delivery = self._ready.popleft()
                self._running += 1
            started = time.monotonic()
            try:
                outcome = self._run(delivery)
            except Exception as exc:  # a bug of ours: the task still ends in a nack
                log.exception("running task %s failed", delivery["task"]["id"])
                task = delivery["task"]
                outcome = Outcome(
                    task["id"], delivery["lease_id"], None, repr(exc), started, task.get("type")
                )
            now = time.monotonic()
            with self._lock:
                took, average = now - started, self._task_s
                self._task_s = took if average is None else average + (took - average) / 8
                self._running -= 1
                if not self._outbox:
                    self._oldest = now
                self._outbox.append(outcome)
                limit = self._limit()
                free = limit - len(self._ready) - self._running - self._reserved
                # Wake a pump only when it may have something new to do: start the linger,
                # refill now that half the limit is free or a thread has nothing to start,
                # or finish.
                if (
                    len(self._outbox) == 1
                    or free == _half(limit)
                    or not self._ready
                    or self._stopping
                ):
                    self._pumps.notify()

    # -- pumps ----------------------------------------------------------------------------

    def _pump(self) -> None:
        """Send claims and settles as _next() decides, until stopping and all is settled."""
        while True:
            with self._lock:
                action = self._next()
                if action is None:
                    self._pumps.notify_all()  # the other pump may be waiting for this end too
                    return
                outcomes, max_n, wait_ms = action
                # The one claim that may wait for work: any that waits, or carries nothing
                # (with --wait-ms 0, one pump polls, not both).
                parks = bool(max_n and (wait_ms or not outcomes))
                self._reserved += max_n
                self._parked += parks
            deliveries, again = self._exchange(outcomes, max_n, wait_ms)
            for delivery in deliveries:
                self._heartbeat.hold(delivery["task"]["id"], delivery["lease_id"])
            with self._lock:
                self._reserved -= max_n
                self._parked -= parks
                if deliveries:
                    self._ready.extend(deliveries)
                    self._answered = time.monotonic()
                    self._tasks.notify(len(deliveries))
                if again:
                    self._outbox[:0] = again
                    self._oldest = 0.0  # due now
                if self._stopping and not self._reserved:
                    self._tasks.notify_all()  # nothing more can come: idle threads may end
                self._pumps.notify()

    def _next(self) -> tuple[list[Outcome], int, int] | None:
        """Under the lock: wait for something to send; (outcomes, max to claim, wait_ms).

        None once stopping with nothing in hand, in flight or unsent.
        """
        while True:
            now = time.monotonic()
            limit = self._limit()
            free = limit - len(self._ready) - self._running - self._reserved
            may_claim = not self._stopping and free > 0 and now >= self._claim_after
            idle = not self._ready and self._running < self._concurrency
            refill = may_claim and (free >= _half(limit) or idle)
            deadlines = []
            if refill and not self._parked:
                # Tasks just claimed may be done in a moment: wait that long for their outcomes
                # to ride along, rather than claim now and ack in a request of their own.
                in_hand = self._ready or self._running
                settling_soon = in_hand and now - self._answered < self._linger_s
                if self._outbox or not settling_soon:
                    wait_ms = self._settle_wait_ms if self._outbox else self._wait_ms
                    return self._take(), min(free, MAX_CLAIM), wait_ms
                deadlines.append(self._answered + self._linger_s)
            if self._outbox:
                if self._stopping or refill or now - self._oldest >= self._linger_s:
                    return self._take(), min(free, MAX_CLAIM) if may_claim else 0, 0
                deadlines.append(self._oldest + self._linger_s)
            elif self._stopping and not (self._ready or self._running or self._reserved):
                return None
            if not self._stopping and free > 0 and now < self._claim_after:
                deadlines.append(self._claim_after)
            self._pumps.wait(min(deadlines) - now if deadlines else None)

    def _limit(self) -> int:
        """Under the lock: tasks to hold now, one per thread plus those waiting their turn."""
        threads = self._concurrency
        if self._task_s is None:
            waiting = threads
        else:
            waiting = int(threads * self._ahead_s / max(self._task_s, 1e-6))
        return min(self._most, threads + waiting)

    def _take(self) -> list[Outcome]:
        """Under the lock: the outbox's first MAX_SETTLES outcomes, removed."""
        taken, self._outbox = self._outbox[:MAX_SETTLES], self._outbox[MAX_SETTLES:]
        return taken

    def _exchange(
        self, outcomes: list[Outcome], max_n: int, wait_ms: int
    ) -> tuple[list[Delivery], list[Outcome]]:
        """Settle outcomes and claim up to max_n: (deliveries, outcomes to send again).

        Sent again: acks the broker refused for their result, now nacks; and, after an
        unexpected error, every outcome whose fate is unknown. Never raises: a refused claim
        holds all claims back for a growing pause.
        """
        ordered, acks, nacks = split(outcomes)
        deliveries: list[Delivery] = []
        try:
            if max_n:
                claimed = self._client.settle_and_claim(
                    acks,
                    nacks,
                    max_n=max_n,
                    wait_ms=wait_ms,
                    lease_ms=self._lease_ms,
                    queues=self._queues,
                )
                statuses, deliveries = claimed.statuses, claimed.deliveries
            else:  # (nothing to send when every outcome was a suspend)
                statuses = self._client.settle(acks, nacks) if ordered else []
            self._failures = 0
        except BrokerError as exc:
            statuses = exc.settled
            self._back_off(f"claim failed: {exc}")
            if len(statuses) != len(ordered):
                return [], ordered
        except Exception:
            time.sleep(self._back_off("claim or settle failed", exc_info=True))
            return [], ordered
        return deliveries, report(ordered, statuses)

    def _back_off(self, why: str, *, exc_info: bool = False) -> float:
        """Log, and hold every pump's claims back for a growing pause (so none spins); the pause."""
        with self._lock:
            self._failures += 1
            pause = backoff_s(self._failures, self._error_backoff_s, 30.0)
            self._claim_after = time.monotonic() + pause
        log.error("%s; retrying in %.1f s", why, pause, exc_info=exc_info)
        return pause


def _half(limit: int) -> int:
    """Free slots that make a refill worth a round trip: half the limit, rounded up."""
    return max(1, (limit + 1) // 2)

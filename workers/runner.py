"""The worker loop: threads claim, run the handler, ack or nack; stop() drains them."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contract.wording import counted
from workers import handlers
from workers.client import backoff_s
from workers.heartbeat import DEFAULT_REPORT_S, Heartbeat
from workers.job import Job, Suspended, running
from workers.outcomes import (
    Outcome,
    checked,
    failure_text,
    log_outcome,
    refused_result,
    report,
    split,
)
from workers.prefetch import Prefetcher
from workers.wire import (
    DEFAULT_MAX_BODY_BYTES,
    MAX_LEASE_MS,
    Broker,
    BrokerError,
    Delivery,
    ResultRefusedError,
)

log = logging.getLogger(__name__)

# The task's handler (workers.handlers.Dispatch); raises to nack it with that error.
Resolver = Callable[[Mapping[str, Any]], handlers.Run]


class Runner:
    """Runs tasks on concurrency threads in one of three modes; each task ends in an ack or nack.

    - prefetch > 0: pumps claim up to concurrency x prefetch tasks ahead and settle with their
      next claim (workers.prefetch);
    - batch > 1: each thread claims up to batch tasks and runs them; a Settler acks them;
    - otherwise each thread claims one task, runs it, acks or nacks it.

    A handler's exception, or a result no ack can carry, becomes a nack with its text; nothing
    a handler does ends a thread. Leases of tasks in hand are extended every half lease by one
    shared Heartbeat.
    """

    def __init__(
        self,
        client: Broker,
        *,
        resolve: Resolver | None = None,
        concurrency: int = 3,
        wait_ms: int = 20000,
        lease_ms: int = 30000,
        queues: Sequence[str] = (),
        heartbeat_s: float | None = None,
        error_backoff_s: float = 1.0,
        batch: int = 1,
        prefetch: int = 0,
        prefetch_ahead_s: float = 1.0,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        report_s: float = DEFAULT_REPORT_S,
    ) -> None:
        """resolve: each task's handler (default: workers.handlers.Dispatch(), untyped tasks
        to ./jobs.log). heartbeat_s defaults to half the lease; error_backoff_s is the first
        pause after a failed claim (doubling, capped at 30 s), so a misconfigured worker never
        spins.
        prefetch_ahead_s: at most this much work waits its turn in prefetch mode (workers.prefetch).
        lease_ms over the broker's cap is lowered to it (the broker would grant no more).
        max_body_bytes: the broker's body limit; a larger result is nacked, not sent.
        report_s: a handler's progress report waits at most this long for its lease's beat.
        Raises ValueError when both batch > 1 and prefetch are asked for.
        """
        if batch > 1 and prefetch:
            raise ValueError("batch and prefetch are two modes: choose one")
        if lease_ms > MAX_LEASE_MS:
            log.warning("lease of %d ms lowered to the broker's cap, %d ms", lease_ms, MAX_LEASE_MS)
            lease_ms = MAX_LEASE_MS
        self._client = client
        self._resolve = resolve or handlers.Dispatch()
        self._concurrency = concurrency
        self._wait_ms = wait_ms
        self._lease_ms = lease_ms
        self._queues = tuple(queues)
        self._error_backoff_s = error_backoff_s
        self._max_body_bytes = max_body_bytes
        self._heartbeat = Heartbeat(client, lease_ms, interval_s=heartbeat_s, report_s=report_s)
        self._stop = threading.Event()
        self._batch = batch
        self._settler = Settler(client) if batch > 1 else None
        self._prefetcher = (
            Prefetcher(
                client,
                self._run_held,
                self._heartbeat,
                concurrency=concurrency,
                prefetch=prefetch,
                wait_ms=wait_ms,
                lease_ms=lease_ms,
                queues=self._queues,
                ahead_s=prefetch_ahead_s,
                error_backoff_s=error_backoff_s,
            )
            if prefetch
            else None
        )

    claim_grace_s = 1.0

    @property
    def lease_ms(self) -> int:
        """The lease asked for with each claim (and extended to by the heartbeat)."""
        return self._lease_ms

    @property
    def stopping(self) -> bool:
        """True once stop() was called."""
        return self._stop.is_set()

    def stop(self) -> None:
        """Stop claiming: parked claims return at once, tasks in hand still get acked or nacked.

        Safe to call from a signal handler and from any thread, more than once.
        """
        if self._stop.is_set():
            return
        self._stop.set()
        if self._prefetcher is not None:
            self._prefetcher.stop()
        # Parked claims hang up at once (their sockets' write side shut): the broker drops a
        # parked claim on seeing it and hands it nothing, while a claim it is already answering
        # still gets its task, which is run (cut both ways, it would be stranded until its
        # lease expired). One still open after the grace (a proxy that hides a half-close) is
        # cut.
        self._client.cancel_claims(hard=False)
        timer = threading.Timer(self.claim_grace_s, self._client.cancel_claims)
        timer.daemon = True
        timer.start()

    def run(self) -> None:
        """Run the worker threads until stop(); return once each has finished its task."""
        if self._prefetcher is not None:
            threads = self._prefetcher.threads()
        else:
            threads = [
                threading.Thread(target=self._work, name=f"worker-{n}", daemon=True)
                for n in range(1, self._concurrency + 1)
            ]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    # Short joins keep the main thread free to run signal handlers.
                    thread.join(0.25)
        finally:
            self.close()

    def close(self) -> None:
        """Send the acks still queued, then stop the threads (run() does this on its way out)."""
        if self._settler is not None:
            self._settler.close()
        self._heartbeat.close()

    def _work(self) -> None:
        """One worker thread: tick until stopped, backing off after errors."""
        failures = 0
        step = self.tick if self._settler is None else self.tick_batch
        while not self._stop.is_set():
            try:
                step()
                failures = 0
            except Exception as exc:
                failures += 1
                pause = backoff_s(failures, self._error_backoff_s, 30.0)
                if isinstance(exc, BrokerError):
                    log.error("claim failed: %s; retrying in %.1f s", exc, pause)
                else:
                    log.exception("worker loop error; retrying in %.1f s", pause)
                self._stop.wait(pause)

    def tick(self) -> str | None:
        """Claim once and handle what came. The outcome, or None when nothing was claimed.

        Raises BrokerError when the broker refuses the claim itself (a 4xx).
        """
        if self._stop.is_set():
            return None
        delivery = self._client.claim(self._wait_ms, self._lease_ms, self._queues)
        if delivery is None:
            return None
        return self.handle(delivery)

    def handle(self, delivery: Delivery) -> str:
        """Run the task's handler under a heartbeat, then ack its result or nack its error.

        The outcome: "acked", "nacked", or "ack refused"/"nack refused" when the broker
        did not take it (404/409, or the lease ended first).
        """
        self._heartbeat.hold(delivery["task"]["id"], delivery["lease_id"])
        outcome = self._run_held(delivery)
        task_id, lease_id = outcome.task_id, outcome.lease_id
        said = ""
        if outcome.suspended:
            return "suspended"
        if outcome.error is None:
            try:
                said = "acked" if self._client.ack(task_id, lease_id, outcome.result) else ""
                said = said or "ack refused"
            except ResultRefusedError as exc:
                outcome = outcome._replace(error=refused_result(exc.status, exc.message))
        if outcome.error is not None:
            nacked = self._client.nack(task_id, lease_id, outcome.error)
            said = "nacked" if nacked else "nack refused"
        log_outcome(outcome, said, time.monotonic())
        return said

    def tick_batch(self) -> int:
        """Claim up to batch tasks, run them one by one, hand each outcome to the Settler.

        Every claimed lease is heartbeaten at once: the later tasks wait their turn in hand.
        Tasks claimed are run even after stop(). The number of tasks claimed.
        """
        if self._stop.is_set() or self._settler is None:
            return 0
        deliveries = self._client.claim_many(
            self._batch, self._wait_ms, self._lease_ms, self._queues
        )
        for delivery in deliveries:
            self._heartbeat.hold(delivery["task"]["id"], delivery["lease_id"])
        for n, delivery in enumerate(deliveries):
            try:
                self._settler.put(self._run_held(delivery))
            except BaseException:
                # Never leave the rest beaten forever: their leases end and the broker
                # hands them out again.
                for rest in deliveries[n:]:
                    self._heartbeat.release(rest["task"]["id"], rest["lease_id"])
                raise
        return len(deliveries)

    def _run_held(self, delivery: Delivery) -> Outcome:
        """Run one task whose lease the heartbeat holds (released here, after its last report
        is sent); its checked outcome."""
        job = Job(delivery, self._heartbeat)
        started = time.monotonic()
        error: str | None
        waits: dict[str, Any] | None = None
        try:
            with running(job):
                result = self._resolve(job)(job)
        except Suspended as exc:
            result, error, waits = None, None, exc.body
        # SystemExit too: a handler calling sys.exit() must not end the worker thread.
        except (Exception, SystemExit) as exc:
            result, error = None, failure_text(exc)
        else:
            result, error = checked(result, self._max_body_bytes)
        finally:
            self._heartbeat.finish(job.id, job.lease_id)  # its reports (a checkpoint) first
        outcome = Outcome(job.id, job.lease_id, result, error, started, job.get("type"))
        if waits is not None:
            said = "suspended" if self._client.wait(job.id, job.lease_id, waits) else "wait refused"
            outcome = outcome._replace(suspended=True)
            log_outcome(outcome, said, time.monotonic())
        return outcome


class Settler:
    """One thread that sends queued outcomes as soon as they come, batched only by circumstance.

    It blocks for the first outcome, takes whatever else is already queued without waiting,
    and sends one POST /jobs/ack (and one /jobs/nack if any): an ack is never held back for
    more acks; outcomes pile up only while a request is in flight.
    """

    def __init__(self, client: Broker) -> None:
        """The thread starts on the first put()."""
        self._client = client
        self._queue: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def put(self, outcome: Outcome) -> None:
        """Queue an outcome for sending."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="settler", daemon=True)
                self._thread.start()
        self._queue.put(outcome)

    def close(self) -> None:
        """Send everything queued, then end the thread and wait for it."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join()

    def _run(self) -> None:
        """Block for one outcome, drain the rest, send; until close()'s marker arrives."""
        closing = False
        while not closing:
            items = [self._queue.get()]
            while True:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            closing = None in items
            self.send([item for item in items if item is not None])

    def send(self, outcomes: Sequence[Outcome]) -> None:
        """One ack request for the successes, one nack request for the failures; log each.

        Acks the broker refuses for their result are sent again as nacks.
        """
        while outcomes:
            ordered, acks, nacks = split(outcomes)
            if not ordered:
                return  # suspended, every one: nothing to settle
            try:
                statuses = self._client.settle(acks, nacks)
            except Exception:
                log.exception("settling %s failed", counted(len(ordered), "task"))
                return
            outcomes = report(ordered, statuses)

"""The worker loop: threads claim, run the handler, ack or nack; stop() drains them."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from workers import handlers
from workers.client import Broker, BrokerError, Delivery, backoff_s
from workers.heartbeat import Heartbeat

log = logging.getLogger(__name__)

Resolver = Callable[[Mapping[str, Any]], handlers.Handler]


class Runner:
    """Runs concurrency threads, each long-polling the broker and handling one task at a time.

    A handler's exception becomes a nack with its text; nothing a handler does ends a thread.
    Leases of tasks in hand are extended every half lease by one shared Heartbeat.
    """

    def __init__(
        self,
        client: Broker,
        *,
        resolve: Resolver = handlers.resolve,
        concurrency: int = 3,
        wait_ms: int = 20000,
        lease_ms: int = 30000,
        queues: Sequence[str] = (),
        heartbeat_s: float | None = None,
        error_backoff_s: float = 1.0,
    ) -> None:
        """heartbeat_s defaults to half the lease; error_backoff_s is the first pause after a
        failed claim (doubling, capped at 30 s), so a misconfigured worker never spins.
        """
        self._client = client
        self._resolve = resolve
        self._concurrency = concurrency
        self._wait_ms = wait_ms
        self._lease_ms = lease_ms
        self._queues = tuple(queues)
        self._error_backoff_s = error_backoff_s
        self._heartbeat = Heartbeat(client, lease_ms, interval_s=heartbeat_s)
        self._stop = threading.Event()

    claim_grace_s = 1.0

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
        # Claims already answering get a moment to arrive: a claim cut after the broker handed
        # out its task would strand that task until its lease expires. Claims still parked
        # after the grace are cut; the broker sees the hang-up and hands them nothing.
        timer = threading.Timer(self.claim_grace_s, self._client.cancel_claims)
        timer.daemon = True
        timer.start()

    def run(self) -> None:
        """Run the worker threads until stop(); return once each has finished its task."""
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
        """Stop the heartbeat thread (run() does this on its way out)."""
        self._heartbeat.close()

    def _work(self) -> None:
        """One worker thread: tick until stopped, backing off after errors."""
        failures = 0
        while not self._stop.is_set():
            try:
                self.tick()
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
        task = delivery["task"]
        task_id, lease_id = task["id"], delivery["lease_id"]
        started = time.monotonic()
        result, error = self._run_handler(task, lease_id)
        if error is None:
            try:
                verb, done = "ack", self._client.ack(task_id, lease_id, result)
            except (TypeError, ValueError) as exc:  # the result does not encode as JSON
                error = f"handler result is not JSON: {exc}"
        if error is not None:
            verb, done = "nack", self._client.nack(task_id, lease_id, error)
        outcome = f"{verb}ed" if done else f"{verb} refused"
        log.info(
            "task %s %s in %.3f s%s",
            task_id, outcome, time.monotonic() - started, f": {error}" if error else "",
        )
        return outcome

    def _run_handler(self, task: Mapping[str, Any], lease_id: str) -> tuple[Any, str | None]:
        """(result, None) on success, (None, error text) on any exception."""
        self._heartbeat.hold(task["id"], lease_id)
        try:
            return self._resolve(task)(task), None
        # SystemExit too: a handler calling sys.exit() must not end the worker thread.
        except (Exception, SystemExit) as exc:
            return None, str(exc) or type(exc).__name__
        finally:
            self._heartbeat.release(task["id"], lease_id)

"""One shared thread that extends every in-flight lease each half lease."""

from __future__ import annotations

import logging
import threading
import time

from workers.wire import Broker

log = logging.getLogger(__name__)

Lease = tuple[str, str]  # (task_id, lease_id)


class Heartbeat:
    """Extends the leases of tasks in hand, every interval_s, from one thread.

    The thread starts on the first hold() and ends on close(). Extends run outside the lock,
    so a slow broker delays the next beats but never a worker's hold() or release().
    """

    def __init__(self, client: Broker, lease_ms: int, *, interval_s: float | None = None) -> None:
        """interval_s defaults to half the lease."""
        self._client = client
        self._lease_ms = lease_ms
        self._interval_s = lease_ms / 2000 if interval_s is None else interval_s
        self._due: dict[Lease, float] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def hold(self, task_id: str, lease_id: str) -> None:
        """Start extending this lease, first after one interval."""
        with self._cond:
            if self._closed:
                raise RuntimeError("heartbeat closed")
            self._due[(task_id, lease_id)] = time.monotonic() + self._interval_s
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
                self._thread.start()
            # The thread sleeps until the earliest due lease; a new one is due later than any
            # other, so only a thread sleeping with nothing to beat needs waking (not per task).
            if len(self._due) == 1:
                self._cond.notify()

    def release(self, task_id: str, lease_id: str) -> None:
        """Stop extending this lease (call before the ack or nack)."""
        with self._cond:
            self._due.pop((task_id, lease_id), None)

    def close(self) -> None:
        """Stop the thread and wait for it (an extend in flight finishes first)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        """Wait for the next due lease, extend every due one, repeat until closed."""
        while True:
            with self._cond:
                due = self._wait_for_due()
                if due is None:
                    return
            for task_id, lease_id in due:
                self._beat(task_id, lease_id)

    def _wait_for_due(self) -> list[Lease] | None:
        """Under the lock: the leases due now (rescheduled), or None once closed."""
        while not self._closed:
            now = time.monotonic()
            due = [lease for lease, at in self._due.items() if at <= now]
            if due:
                for lease in due:
                    self._due[lease] = now + self._interval_s
                return due
            self._cond.wait(min(self._due.values()) - now if self._due else None)
        return None

    def _beat(self, task_id: str, lease_id: str) -> None:
        """Extend one lease; stop beating it when the broker says it is lost."""
        try:
            extended = self._client.extend(task_id, lease_id, self._lease_ms)
        except Exception:
            log.exception("extend of task %s failed", task_id)
            return
        if extended:
            return
        with self._cond:
            held = self._due.pop((task_id, lease_id), None) is not None
        if held:  # a release() meanwhile means the task was finished: no news then
            log.warning("lease of task %s is lost; its ack or nack will be refused", task_id)

"""One shared thread that extends every in-flight lease each half lease, carrying the latest
progress report of each task with its extend."""

from __future__ import annotations

import logging
import threading
import time

from workers.wire import Broker, Report

log = logging.getLogger(__name__)

Lease = tuple[str, str]  # (task_id, lease_id)

# A report waits at most this long for its lease's beat: the beat is moved up to carry it.
DEFAULT_REPORT_S = 1.0


class Heartbeat:
    """Extends the leases of tasks in hand, every interval_s, from one thread.

    The thread starts on the first hold() and ends on close(). Extends run outside the lock,
    so a slow broker delays the next beats but never a worker's hold() or release().

    Reports (report()) wait for their lease's next beat, which then goes as POST
    /jobs/{id}/progress with lease_ms: one request both reports and extends. A beat more than
    report_s away is moved up to report_s, and the one after it comes a whole interval later,
    so a task reporting all the time costs one request per report_s, and one that never
    reports costs nothing more than before. finish() sends a report still waiting before the
    task's ack or nack, after any beat of it in flight: a retry then resumes from the last
    checkpoint, never an older one.
    """

    def __init__(
        self,
        client: Broker,
        lease_ms: int,
        *,
        interval_s: float | None = None,
        report_s: float = DEFAULT_REPORT_S,
    ) -> None:
        """interval_s defaults to half the lease; report_s is capped to it."""
        self._client = client
        self._lease_ms = lease_ms
        self._interval_s = lease_ms / 2000 if interval_s is None else interval_s
        self._report_s = min(report_s, self._interval_s)
        self._due: dict[Lease, float] = {}
        self._reports: dict[Lease, Report] = {}
        self._in_flight: set[Lease] = set()
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
                self._cond.notify_all()

    def report(self, task_id: str, lease_id: str, report: Report) -> None:
        """Send report (merged into any still waiting) with this lease's next beat, moved up to
        report_s away; nothing when the lease is not held."""
        lease = (task_id, lease_id)
        with self._cond:
            due = self._due.get(lease)
            if due is None:
                return
            self._reports[lease] = {**self._reports.get(lease, {}), **report}
            soon = time.monotonic() + self._report_s
            if due > soon:
                self._due[lease] = soon
                self._cond.notify_all()

    def flush(self, task_id: str, lease_id: str) -> bool:
        """Send this lease's waiting report now, from the calling thread; True when there was
        none or the broker took it."""
        lease = (task_id, lease_id)
        with self._cond:
            self._wait_idle(lease)
            report = self._reports.pop(lease, None)
            if report is None:
                return True
            self._in_flight.add(lease)
        try:
            return self._send(task_id, lease_id, report, extend=False)
        finally:
            with self._cond:
                self._in_flight.discard(lease)
                self._cond.notify_all()

    def release(self, task_id: str, lease_id: str) -> None:
        """Stop extending this lease; a waiting report is dropped (see finish())."""
        with self._cond:
            self._due.pop((task_id, lease_id), None)
            self._reports.pop((task_id, lease_id), None)

    def finish(self, task_id: str, lease_id: str) -> None:
        """Stop extending this lease, then send its waiting report, if any (call before the
        ack or nack): the task ends showing its last progress and checkpoint."""
        with self._cond:
            self._due.pop((task_id, lease_id), None)  # no beat of it starts after this
        try:
            self.flush(task_id, lease_id)
        except Exception:
            log.exception("the last report of task %s failed", task_id)

    def close(self) -> None:
        """Stop the thread and wait for it (an extend in flight finishes first)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _wait_idle(self, lease: Lease) -> None:
        """Under the lock: until no beat of this lease is in flight (reports stay in order)."""
        while lease in self._in_flight:
            self._cond.wait()

    def _run(self) -> None:
        """Wait for the next due lease, beat every due one, repeat until closed."""
        while True:
            with self._cond:
                due = self._wait_for_due()
                if due is None:
                    return
            for lease, report in due:
                try:
                    self._beat(*lease, report)
                finally:
                    with self._cond:
                        self._in_flight.discard(lease)
                        self._cond.notify_all()

    def _wait_for_due(self) -> list[tuple[Lease, Report | None]] | None:
        """Under the lock: the leases due now (rescheduled, marked in flight, each with its
        waiting report taken), or None once closed."""
        while not self._closed:
            now = time.monotonic()
            # A lease being flushed waits: its beat would race the flush's report.
            waiting = {lease: at for lease, at in self._due.items() if lease not in self._in_flight}
            due = [lease for lease, at in waiting.items() if at <= now]
            if due:
                for lease in due:
                    self._due[lease] = now + self._interval_s
                    self._in_flight.add(lease)
                return [(lease, self._reports.pop(lease, None)) for lease in due]
            self._cond.wait(min(waiting.values()) - now if waiting else None)
        return None

    def _beat(self, task_id: str, lease_id: str, report: Report | None) -> None:
        """Extend one lease (with its report); stop beating it when the broker says it is lost."""
        try:
            if report is None:
                held = self._client.extend(task_id, lease_id, self._lease_ms)
            else:
                held = self._send(task_id, lease_id, report, extend=True)
        except Exception:
            log.exception("extend of task %s failed", task_id)
            if report is not None:
                self._put_back(task_id, lease_id, report)
            return
        if held:
            return
        with self._cond:
            lost = self._due.pop((task_id, lease_id), None) is not None
            self._reports.pop((task_id, lease_id), None)
        if lost:  # a release() meanwhile means the task was finished: no news then
            log.warning("lease of task %s is lost; its ack or nack will be refused", task_id)

    def _send(self, task_id: str, lease_id: str, report: Report, *, extend: bool) -> bool:
        lease_ms = self._lease_ms if extend else None
        return self._client.progress(task_id, lease_id, report, lease_ms)

    def _put_back(self, task_id: str, lease_id: str, report: Report) -> None:
        """A report that did not get through waits again, under any newer one."""
        lease = (task_id, lease_id)
        with self._cond:
            if lease in self._due:
                self._reports[lease] = {**report, **self._reports.get(lease, {})}

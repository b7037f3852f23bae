"""The job a handler runs: the delivered task (read as a mapping) and the handler's line back to
the broker while it runs: progress and checkpoints, which ride on the lease's heartbeat."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, NoReturn, Protocol, cast

from contract.limits import (
    MAX_CHECKPOINT_BYTES,
    MAX_EVENT_KEY,
    MAX_EVENT_NAME,
    MAX_PROGRESS_MESSAGE,
    MAX_WAIT_TIMEOUT_MS,
    ON_TIMEOUT,
)
from workers.wire import Delivery, Report


class Reports(Protocol):
    """Where a job's reports go: the heartbeat of its lease (workers.heartbeat)."""

    def report(self, task_id: str, lease_id: str, report: Report) -> None:
        """Send this with the lease's next beat, which comes soon."""
        ...

    def flush(self, task_id: str, lease_id: str) -> bool:
        """Send what is waiting now; False when the broker did not take it."""
        ...


_current = threading.local()


def current_job() -> Job | None:
    """The job this thread runs now (None outside a handler): for code deep inside a handler,
    a django.tasks function say, that was not handed the job."""
    job: Job | None = getattr(_current, "job", None)
    return job


class Suspended(Exception):
    """Raised by job.wait_for_event(): the runner suspends the task (POST /jobs/{id}/wait)
    instead of acking or nacking it. A handler must let it through."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(f"waiting for the event {body['event']!r} with key {body['key']!r}")
        self.body = body


class Job(Mapping[str, Any]):
    """A delivered task: `job["payload"]`, `job.id`, ... as the broker sent it, plus

    - `job.after`, `job.parents`, `job.parent_results`: the tasks it waited for (`after`), with
      their states and results, delivered with it;
    - `job.checkpoint`: where to resume from: the last checkpoint saved, by this run or (as
      delivered) by an earlier attempt; None on a first delivery;
    - `job.event`: the event that released the task ({"id", "name", "key", "data", "at"}, as
      delivered), None when none did;
    - `job.progress(fraction, message)`: how far it got (each call replaces the last);
    - `job.save_checkpoint(value)`: any JSON (at most 64 KiB) a later attempt resumes from;
    - `job.flush()`: send what is waiting now rather than with the next beat;
    - `job.wait_for_event(event, key, ...)`: stop here and give the task back until that event
      comes; it is delivered again with its checkpoint and `job.event` (docs/events.md).

    Reports go with the lease's heartbeat, moved up to at most a second away, so a handler may
    report as often as it likes: the broker hears the latest about once a second, and a report
    costs no request of its own where an extend was due anyway. What is still waiting when the
    handler returns or raises is sent before its ack or nack.
    """

    def __init__(self, delivery: Delivery, reports: Reports | None = None) -> None:
        """reports None: reports are checked and kept here only (tests, a dry run)."""
        self._task: Mapping[str, Any] = delivery["task"]
        self.lease_id: str = delivery["lease_id"]
        self._reports = reports
        self._checkpoint = self._task.get("checkpoint")
        self.last_report: Report = {}

    @classmethod
    def bare(cls, payload: Any, checkpoint: Any = None) -> Job:
        """A job outside any worker (a test, a direct call): its reports go nowhere."""
        task = {"id": "", "payload": payload, "attempts": 1, "checkpoint": checkpoint}
        return cls(cast(Delivery, {"task": task, "lease_id": "", "deadline": ""}))

    # -- the task, as delivered ------------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        return self._task[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._task)

    def __len__(self) -> int:
        return len(self._task)

    @property
    def id(self) -> str:
        """The task's id."""
        task_id: str = self._task["id"]
        return task_id

    @property
    def payload(self) -> Any:
        """The task's payload, as enqueued."""
        return self._task["payload"]

    @property
    def attempts(self) -> int:
        """Deliveries so far, this one included."""
        attempts: int = self._task["attempts"]
        return attempts

    @property
    def after(self) -> list[str]:
        """The ids of the tasks it waited for, in the order it named them ([] when none)."""
        return list(self._task.get("after") or ())

    @property
    def parents(self) -> dict[str, dict[str, Any]]:
        """Per task it waited for: {"state", "result"} as they finished ({} when none)."""
        return dict(self._task.get("parents") or {})

    @property
    def parent_results(self) -> list[Any]:
        """The results of the tasks it waited for, in `after` order: a fan-in step's inputs."""
        parents = self.parents
        return [parents.get(pk, {}).get("result") for pk in self.after]

    @property
    def event(self) -> dict[str, Any] | None:
        """The event that released the task, as the delivery carries it; None when none did."""
        event: dict[str, Any] | None = self._task.get("event")
        return event

    @property
    def checkpoint(self) -> Any:
        """The last checkpoint saved (by this run, else by an earlier attempt); None if none."""
        return self._checkpoint

    # -- reports ---------------------------------------------------------------------------

    def progress(self, fraction: float | None = None, message: str | None = None) -> None:
        """Say how far the task got: `fraction` from 0 to 1 (or None), `message` (cut to 1000
        characters). Raises ValueError for a fraction outside [0, 1]."""
        if fraction is not None:
            if isinstance(fraction, bool) or not isinstance(fraction, int | float):
                raise TypeError(f"fraction must be a number, not {type(fraction).__name__}")
            if not (math.isfinite(fraction) and 0 <= fraction <= 1):
                raise ValueError(f"fraction must be from 0 to 1, not {fraction}")
        if message is not None:
            message = str(message)[:MAX_PROGRESS_MESSAGE]
        self._send({"fraction": fraction, "message": message})

    def save_checkpoint(self, value: Any) -> None:
        """Keep `value` (any JSON) on the task: a later attempt of it is delivered with it.

        Raises ValueError when it is not JSON or is over 64 KiB as JSON; the value is copied,
        so changing it afterwards changes nothing sent.
        """
        self._checkpoint = self._checked_checkpoint(value)
        self._send({"checkpoint": self._checked_checkpoint(value)})

    @staticmethod
    def _checked_checkpoint(value: Any) -> Any:
        """A copy of `value` as JSON carries it; ValueError when not JSON or over 64 KiB."""
        try:
            text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"a checkpoint must be JSON: {exc}") from exc
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_CHECKPOINT_BYTES:
            raise ValueError(f"a checkpoint is at most {MAX_CHECKPOINT_BYTES} bytes; {size} given")
        return json.loads(text)

    def wait_for_event(
        self,
        event: str,
        key: str,
        *,
        since: datetime | str | None = None,
        timeout_ms: int | None = None,
        on_timeout: str = "cancel",
        checkpoint: Any = None,
    ) -> NoReturn:
        """Suspend the task until the event `event` with `key` is received: the handler stops
        here (this raises Suspended, which the runner turns into POST /jobs/{id}/wait, not an
        ack or a nack), the lease and the attempt go back to the broker, and the task is
        delivered again once the event comes, with `job.event` and its checkpoint
        (`checkpoint`, kept by the suspend itself when given; else the last one saved).
        `since`, `timeout_ms` and `on_timeout` as in `wait_for` (docs/events.md). Raises
        ValueError for a bad argument, before anything is sent."""
        for name, value, most in (("event", event, MAX_EVENT_NAME), ("key", key, MAX_EVENT_KEY)):
            if not isinstance(value, str) or not 0 < len(value) <= most or "\x00" in value:
                raise ValueError(f"{name} must be 1 to {most} characters without U+0000")
        if on_timeout not in ON_TIMEOUT:
            raise ValueError(f"on_timeout must be one of {', '.join(ON_TIMEOUT)}")
        if timeout_ms is not None and (
            isinstance(timeout_ms, bool)
            or not isinstance(timeout_ms, int)
            or not 1 <= timeout_ms <= MAX_WAIT_TIMEOUT_MS
        ):
            raise ValueError(f"timeout_ms must be an integer from 1 to {MAX_WAIT_TIMEOUT_MS}")
        body: dict[str, Any] = {"event": event, "key": key, "on_timeout": on_timeout}
        if since is not None:
            body["since"] = since.isoformat() if isinstance(since, datetime) else since
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        if checkpoint is not None:  # sent with the wait itself: kept in the same move
            body["checkpoint"] = self._checked_checkpoint(checkpoint)
            self._checkpoint = body["checkpoint"]
        raise Suspended(body)

    def flush(self) -> bool:
        """Send the waiting report now (one request); True when the broker has every report."""
        if self._reports is None:
            return True
        return self._reports.flush(self.id, self.lease_id)

    def _send(self, report: Report) -> None:
        self.last_report = {**self.last_report, **report}
        if self._reports is not None:
            self._reports.report(self.id, self.lease_id, report)


class running:  # noqa: N801 -- a context manager, named for the `with` it reads in
    """`with running(job):` makes current_job() the job within."""

    def __init__(self, job: Job) -> None:
        self._job = job

    def __enter__(self) -> Job:
        self._previous = getattr(_current, "job", None)
        _current.job = self._job
        return self._job

    def __exit__(self, *exc: object) -> None:
        _current.job = self._previous

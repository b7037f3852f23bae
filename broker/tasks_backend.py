"""A django.tasks backend (django-tasks backport) on this broker: @task functions run in runworker.

    TASKS = {"default": {
        "BACKEND": "broker.tasks_backend.BrokerBackend",
        "QUEUES": [],                                   # any broker queue name
        "OPTIONS": {"ALLOWED_TASKS": ["myapp.tasks.*"], "MAX_ATTEMPTS": 1},
    }}

An enqueue stores a broker task of type "django_task" in the caller's database transaction; its
payload names the function by dotted path with its args and kwargs. runworker's django_task job
type imports and runs it if the path is allowed, and acks its return value or nacks the
traceback. get_result() reads the task row back.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, TypeVar

from django.core import checks
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string
from django_tasks import TaskResult, TaskResultStatus
from django_tasks.backends.base import BaseTaskBackend
from django_tasks.base import Task, TaskError
from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
from django_tasks.signals import task_enqueued
from django_tasks.utils import get_module_path, normalize_json
from typing_extensions import ParamSpec

from contract import djtasks
from contract.djtasks import TaskNotAllowedError, is_allowed
from contract.limits import MAX_DELAY_DAYS, MAX_DELAY_MS, QUEUE_RE, QUEUE_RULE, parse_task_id

# TaskNotAllowedError is re-exported: results name the class by this module's path.
__all__ = [
    "BACKEND_PATH",
    "JOB_TYPE",
    "BrokerBackend",
    "BrokerTaskError",
    "TaskCancelledError",
    "TaskNotAllowedError",
    "broker_priority",
    "is_allowed",
    "task_error",
]

T = TypeVar("T")
P = ParamSpec("P")

JOB_TYPE = djtasks.JOB_TYPE
BACKEND_PATH = djtasks.BACKEND_PATH
MAX_DELAY = timedelta(milliseconds=MAX_DELAY_MS)


class TaskCancelledError(Exception):
    """The task was cancelled in the broker (DELETE /jobs/{id}) before it finished."""


class BrokerTaskError(Exception):
    """A failed attempt the function did not raise: its lease expired, or it was nacked."""


def broker_priority(priority: int) -> str:
    """django.tasks priority (-100..100, higher first) → the broker's: >0 high, 0 normal, <0 low."""
    if priority > 0:
        return "high"
    return "normal" if priority == 0 else "low"


def task_error(text: str) -> TaskError:
    """A stored error → the framework's TaskError; broker-made errors get BrokerTaskError."""
    written = djtasks.split_error(text)
    if written is not None:
        return TaskError(exception_class_path=written[0], traceback=written[1])
    return TaskError(exception_class_path=get_module_path(BrokerTaskError), traceback=text)


# -- the backend ------------------------------------------------------------------------------

# django_tasks types TaskResult.status as its TaskResultStatus, a TextChoices; Django having no
# type information, mypy reads those members as the (value, label) tuples they are written as.
# Hence the two type: ignore[arg-type] at status= below (broker.states types its own choices).
_STATUS = {
    "ready": TaskResultStatus.READY,
    "delayed": TaskResultStatus.READY,  # waiting out run_after or a retry's backoff
    "handed_out": TaskResultStatus.RUNNING,
    "done": TaskResultStatus.SUCCESSFUL,
    "dead": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}


class BrokerBackend(BaseTaskBackend):
    """Tasks go into the broker's database; runworker (django_task job type) runs them."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        if task.takes_context:
            # runworker hands a job type only the payload: no task id or attempt to give.
            raise InvalidTaskError("BrokerBackend does not support takes_context.")
        if not QUEUE_RE.fullmatch(task.queue_name):
            raise InvalidTaskError(f"queue_name must match {QUEUE_RULE}: {task.queue_name!r}")
        if task.run_after is not None and task.run_after - timezone.now() > MAX_DELAY:
            raise InvalidTaskError(f"run_after must be at most {MAX_DELAY_DAYS} days ahead.")

    def enqueue(
        self,
        task: Task[P, T],
        args: P.args,  # type: ignore[valid-type]
        kwargs: P.kwargs,  # type: ignore[valid-type]
    ) -> TaskResult[T]:
        """Store the task in the current transaction (see broker.enqueue); READY or delayed."""
        from broker import queue, validation
        from broker.exceptions import InvalidTaskError as InvalidBody

        self.validate_task(task)
        args, kwargs = normalize_json(args), normalize_json(kwargs)
        payload = {
            "path": task.module_path,
            "args": args,
            "kwargs": kwargs,
            "priority": task.priority,
            "run_after": task.run_after.isoformat() if task.run_after else None,
        }
        try:
            validation.json_text(payload)  # NaN and the like: refused here, by name
        except InvalidBody as exc:
            raise InvalidTaskError(f"args and kwargs must be JSON: {exc.__cause__}") from exc
        body = {
            "payload": payload,
            "max_attempts": int(self.options.get("MAX_ATTEMPTS", 1)),
            "delay_ms": validation.delay_ms_until(task.run_after) if task.run_after else 0,
            "queue": task.queue_name,
            "priority": broker_priority(task.priority),
            "type": JOB_TYPE,
        }
        try:
            spec = validation.new_task(body)
        except InvalidBody as exc:
            raise InvalidTaskError(str(exc)) from exc
        if task.run_after is not None:
            spec = dataclasses.replace(spec, not_before=task.run_after)  # as broker.enqueue's
        pk, _ = queue.enqueue(spec)
        result: TaskResult[T] = TaskResult(
            task=task,
            id=str(pk),
            status=TaskResultStatus.READY,  # type: ignore[arg-type]  # see _STATUS
            enqueued_at=timezone.now(),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The task as stored now; TaskResultDoesNotExist for an id that is not a django_task."""
        from broker.models import Task as Row

        pk = parse_task_id(str(result_id))
        row = Row.objects.filter(pk=pk, type=JOB_TYPE).first() if pk is not None else None
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        payload = json.loads(row.payload)
        task = self._task_for(payload, row.queue, result_id)
        errors = [task_error(e) for e in row.error_history.values_list("error", flat=True)]
        if row.state == "cancelled":
            errors.append(
                TaskError(
                    exception_class_path=get_module_path(TaskCancelledError),
                    traceback="cancelled in the broker",
                )
            )
        finished = row.state in ("done", "dead", "cancelled")
        # The broker names only the worker holding the task, not those of earlier attempts.
        worker_ids = ["unknown"] * row.attempts
        if worker_ids and row.state == "handed_out" and row.worker:
            worker_ids[-1] = row.worker
        result: TaskResult[Any] = TaskResult(  # the return value: any JSON
            task=task,
            id=str(row.pk),
            status=_STATUS[row.state],  # type: ignore[arg-type]  # see _STATUS
            enqueued_at=row.created_at,
            started_at=row.claimed_at,
            last_attempted_at=row.claimed_at,
            finished_at=row.updated_at if finished else None,
            args=payload.get("args", []),
            kwargs=payload.get("kwargs", {}),
            backend=self.alias,
            errors=errors,
            worker_ids=worker_ids,
        )
        if row.state == "done":
            object.__setattr__(
                result, "_return_value", None if row.result is None else json.loads(row.result)
            )
        return result

    def _task_for(self, payload: dict[str, Any], queue_name: str, result_id: str) -> Task:
        """The stored path's Task as enqueued (priority, queue, run_after).

        Imports the path only if allowed, or its module is already imported (the caller of
        my_task.get_result() has it): a row written over HTTP must not import arbitrary code.
        """
        path = str(payload.get("path", ""))
        module = path.rpartition(".")[0]
        if not (is_allowed(path) or module in sys.modules):
            raise TaskResultDoesNotExist(f"{result_id}: {path} is neither imported nor allowed")
        try:
            found = import_string(path)
        except ImportError as exc:
            raise TaskResultDoesNotExist(f"{result_id}: cannot import {path}") from exc
        if not isinstance(found, Task):
            raise TaskResultDoesNotExist(f"{result_id}: {path} is not a @task function")
        run_after = payload.get("run_after")
        return found.using(
            priority=int(payload.get("priority", found.priority)),
            queue_name=queue_name,
            run_after=parse_datetime(run_after) if isinstance(run_after, str) else None,
            backend=self.alias,
        )

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        for name in sorted(self.queues):
            if not QUEUE_RE.fullmatch(name):
                yield checks.Error(
                    f"TASKS[{self.alias!r}] QUEUES: {name!r} is not a broker queue name",
                    hint=f"Queue names match {QUEUE_RULE}.",
                    id="broker.E002",
                )

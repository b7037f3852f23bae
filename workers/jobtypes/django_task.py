"""django_task: runs a django.tasks @task function by dotted path, if this worker allows it.

Enqueued by broker.tasks_backend.BrokerBackend (or POST /jobs with this type). The function's
return value is the ack's result; any exception, a path outside the allow-list included, is a
nack whose error is the exception's class path on the first line, then its traceback.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rest_framework import serializers

from broker.tasks_backend import error_text, load_task
from workers.jobtypes import JobType
from workers.jobtypes._fields import PayloadSchema, StrictInteger, StrictString

_PATH_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", re.ASCII)


class DjangoTaskFailedError(Exception):
    """The task function raised (or could not be run); the message is error_text()'s."""


class _AnyList(serializers.Field):
    def to_internal_value(self, data: Any) -> list[Any]:
        if not isinstance(data, list):
            raise serializers.ValidationError("Must be a JSON array.")
        return data


class _AnyObject(serializers.Field):
    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError("Must be a JSON object.")
        return data


class DjangoTaskPayload(PayloadSchema):
    path = StrictString(max_length=500, trim_whitespace=False)
    args = _AnyList(default=list)
    kwargs = _AnyObject(default=dict)
    priority = StrictInteger(min_value=-100, max_value=100, default=0)
    run_after = StrictString(allow_null=True, default=None)

    def validate_path(self, value: str) -> str:
        if not _PATH_RE.fullmatch(value):
            raise serializers.ValidationError("Must be a dotted path: module.function.")
        return value


def run(payload: dict[str, Any]) -> Any:
    """Import the allowed @task at payload["path"], call it, return its JSON-able result."""
    try:
        task = load_task(payload["path"])
        value = task.call(*payload["args"], **payload["kwargs"])
        # The ack carries the result as JSON: refuse what would not survive the trip here,
        # with a traceback, rather than as an ack the broker turns down.
        json.dumps(value, allow_nan=False)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: a task calling sys.exit() failed
        raise DjangoTaskFailedError(error_text(exc)) from exc
    return value


JOB_TYPE = JobType(
    name="django_task",
    schema=DjangoTaskPayload,
    run=run,
    description=(
        "Runs the django.tasks @task at path with args and kwargs, if the worker's allow-list "
        "(BROKER_TASKS_ALLOWED, or the TASKS backend's OPTIONS['ALLOWED_TASKS']) matches it."
    ),
    # Allowed by the project's TASKS OPTIONS (queueproject/settings.py): returns 5.
    sample=lambda broker_url: {"path": "broker.demo_tasks.add", "args": [2, 3], "kwargs": {}},
)

"""django_task's handler: runs a django.tasks @task function by dotted path, if allowed here.

Enqueued by broker.tasks_backend.BrokerBackend (or POST /jobs with this type). The function's
return value is the ack's result; any exception, a path outside the allow-list included, is a
nack whose error is contract.djtasks.error_text(): the class path, then the traceback.
"""

from __future__ import annotations

import json
from typing import Any

from contract.djtasks import error_text
from contract.jobtypes.django_task import SPEC
from workers import handler
from workers.handlers import PlainError
from workers.jobtypes._django_tasks import load_task


class DjangoTaskFailedError(PlainError):
    """The task function raised (or could not be run); the message is error_text()'s, the
    whole of the nack's error (the django.tasks backend reads its class path and traceback)."""


@handler(SPEC.name, schema=SPEC)
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

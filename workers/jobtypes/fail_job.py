"""fail_job's handler: always fails, so its task retries and ends in the dead-letter queue."""

from __future__ import annotations

from typing import Any

from contract.jobtypes.fail_job import SPEC
from workers import handler
from workers.handlers import PlainError


class JobFailedError(PlainError, RuntimeError):
    """Raised by every fail_job run: the failure is the point, so its error is the message
    alone, without a traceback."""


@handler(SPEC.name, schema=SPEC)
def run(payload: dict[str, Any]) -> Any:
    """Raise JobFailedError with the payload's message (the nack's error)."""
    raise JobFailedError(payload["message"])

"""fail_job: always fails, so its task retries and ends in the dead-letter queue."""

from __future__ import annotations

from typing import Any

from workers.jobtypes import JobType
from workers.jobtypes._fields import PayloadSchema, StrictString


class JobFailedError(RuntimeError):
    """Raised by every fail_job run: the failure is the point."""


class FailPayload(PayloadSchema):
    message = StrictString(max_length=1000, default="fail_job always fails")


def run(payload: dict[str, Any]) -> Any:
    """Raise JobFailedError with the payload's message (the nack's error)."""
    raise JobFailedError(payload["message"])


JOB_TYPE = JobType(
    name="fail_job",
    schema=FailPayload,
    run=run,
    description="Always fails with message (optional); ends in the DLQ.",
    sample=lambda broker_url: {"message": "failing on purpose"},
)

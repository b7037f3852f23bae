"""fail_job: always fails, so its task retries and ends in the dead-letter queue."""

from __future__ import annotations

from contract.fields import PayloadSchema, StrictString
from contract.jobtypes import JobSpec


class FailPayload(PayloadSchema):
    message = StrictString(max_length=1000, default="fail_job always fails")


SPEC = JobSpec(
    name="fail_job",
    schema=FailPayload,
    description="Always fails with message (optional); ends in the DLQ.",
    sample=lambda broker_url: {"message": "failing on purpose"},
)

"""sleep_job: sleeps duration_seconds (default 3, at most an hour) and reports how long."""

from __future__ import annotations

from contract.fields import PayloadSchema, StrictNumber
from contract.jobtypes import JobSpec

MAX_SECONDS = 3600
DEFAULT_SECONDS = 3


class SleepPayload(PayloadSchema):
    duration_seconds = StrictNumber(min_value=0, max_value=MAX_SECONDS, default=DEFAULT_SECONDS)


SPEC = JobSpec(
    name="sleep_job",
    schema=SleepPayload,
    description=f"Sleeps duration_seconds (default {DEFAULT_SECONDS}, at most {MAX_SECONDS}).",
    sample=lambda broker_url: {"duration_seconds": 0.5},
)

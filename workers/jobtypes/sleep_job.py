"""sleep_job: sleeps duration_seconds (default 3, at most an hour) and reports how long."""

from __future__ import annotations

import time
from typing import Any

from workers.jobtypes import JobType
from workers.jobtypes._fields import PayloadSchema, StrictNumber

MAX_SECONDS = 3600


class SleepPayload(PayloadSchema):
    duration_seconds = StrictNumber(min_value=0, max_value=MAX_SECONDS, default=3)


def run(payload: dict[str, Any]) -> dict[str, Any]:
    """Sleep; the result is {"slept_seconds": <the duration asked for>}."""
    time.sleep(payload["duration_seconds"])
    return {"slept_seconds": payload["duration_seconds"]}


JOB_TYPE = JobType(
    name="sleep_job",
    schema=SleepPayload,
    run=run,
    description="Sleeps duration_seconds (default 3, at most 3600).",
    sample=lambda broker_url: {"duration_seconds": 0.5},
)

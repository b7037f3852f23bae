"""sleep_job's handler: sleeps duration_seconds and reports how long."""

from __future__ import annotations

import time
from typing import Any

from contract.jobtypes.sleep_job import SPEC
from workers import handler


@handler(SPEC.name, schema=SPEC)
def run(payload: dict[str, Any]) -> dict[str, Any]:
    """Sleep; the result is {"slept_seconds": <the duration asked for>}."""
    time.sleep(payload["duration_seconds"])
    return {"slept_seconds": payload["duration_seconds"]}

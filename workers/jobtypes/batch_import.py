"""batch_import's handler: the shape of a resumable long task. It starts at the row its last
checkpoint names, reports progress as it goes, and saves a checkpoint every few rows: killed at
row 390 of 400, its retry starts near row 390, not at 0."""

from __future__ import annotations

import time
from typing import Any

from contract.jobtypes.batch_import import SPEC
from workers import handler
from workers.job import Job


@handler(SPEC.name, schema=SPEC)
def run(payload: dict[str, Any], job: Job) -> dict[str, Any]:
    """Import rows [checkpoint, rows); the result says where this attempt started."""
    rows, every = payload["rows"], payload["checkpoint_every"]
    start = int((job.checkpoint or {}).get("next_row", 0))
    for row in range(start, rows):
        time.sleep(payload["row_ms"] / 1000)  # the work of one row
        done = row + 1
        if done % every == 0 or done == rows:
            # Work up to here is kept: a retry starts at the next row.
            job.save_checkpoint({"next_row": done})
            job.progress(done / rows, f"row {done} of {rows}")
    return {"rows": rows, "resumed_at_row": start, "attempt": job.attempts}

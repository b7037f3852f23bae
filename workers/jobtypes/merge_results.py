"""merge_results's handler: reads what the tasks it waited for returned (delivered with it, no
request of its own) and returns them together."""

from __future__ import annotations

from typing import Any

from contract.jobtypes.merge_results import SPEC
from workers import handler
from workers.job import Job


@handler(SPEC.name, schema=SPEC)
def run(payload: dict[str, Any], job: Job) -> dict[str, Any]:
    """{"label", "inputs": {parent id: its result}} in `after` order."""
    return {
        "label": payload["label"],
        "inputs": dict(zip(job.after, job.parent_results, strict=True)),
    }

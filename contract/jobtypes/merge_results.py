"""merge_results: a fan-in step. Its result gathers the results of the tasks it waited for
(`after`), labelled; the step of a workflow that joins its branches."""

from __future__ import annotations

from contract.fields import PayloadSchema, StrictString
from contract.jobtypes import JobSpec


class MergePayload(PayloadSchema):
    label = StrictString(max_length=200, default="merged")


SPEC = JobSpec(
    name="merge_results",
    schema=MergePayload,
    description="Gathers the results of the tasks it waited for (after) under label; a "
    "workflow's join step.",
    sample=lambda broker_url: {"label": "merged"},
)

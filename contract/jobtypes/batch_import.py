"""batch_import: a long task that reports progress and resumes from its checkpoint: imports
`rows` synthetic rows, `row_ms` each, saving a checkpoint every `checkpoint_every` rows."""

from __future__ import annotations

from contract.fields import PayloadSchema, StrictInteger
from contract.jobtypes import JobSpec

MAX_ROWS = 1_000_000
MAX_ROW_MS = 10_000


class ImportPayload(PayloadSchema):
    rows = StrictInteger(min_value=1, max_value=MAX_ROWS, default=200)
    row_ms = StrictInteger(min_value=0, max_value=MAX_ROW_MS, default=50)
    checkpoint_every = StrictInteger(min_value=1, max_value=MAX_ROWS, default=10)


SPEC = JobSpec(
    name="batch_import",
    schema=ImportPayload,
    description="Imports rows (row_ms each), reporting progress; a retry resumes from its "
    "last checkpoint (every checkpoint_every rows).",
    sample=lambda broker_url: {"rows": 60, "row_ms": 50},
)

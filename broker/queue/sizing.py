"""How large a claim's answer grows, so that a claim of many stops adding tasks once its answer
passes MAX_ANSWER_BYTES (API.md's Errors, "Bounded work"), and hands out no task it leaves out.

A delivery is reckoned by its stored JSON, which goes out as stored (the payload, the
checkpoint, and each parent's result), plus an allowance for its other fields. Stored JSON is
ASCII (validation.dump_json escapes the rest), so its length in characters is its size in bytes.

The one-statement claims of PostgreSQL apply this in their own statement (sql.CLAIM_*_MANY,
sql.DELIVERY_SIZE);
the claims that take several statements in a transaction (restricted queues, SQLite) use
`fitting` before handing out, or `check` before they commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from django.db.models import Func, IntegerField, Sum, Value
from django.db.models.functions import Coalesce

from broker.models import Dependency
from broker.queue.base import ClaimedTask
from contract.limits import MAX_ANSWER_BYTES

# A delivery's fields beside its stored JSON: its id, times, queue, type, key, lease and deadline.
DELIVERY_BYTES = 512
# A parent's entry beside its result: its id (in `after` and `parents`) and its state.
PARENT_BYTES = 64
NULL_BYTES = len("null")  # a checkpoint or result that is not there

# A claim row's columns are ClaimedTask's fields (sql.CLAIM_COLUMNS), in order.
_COLUMNS = [f.name for f in fields(ClaimedTask)]
_ID, _PAYLOAD = _COLUMNS.index("pk"), _COLUMNS.index("payload")
_CHECKPOINT, _AFTER_POLICY = _COLUMNS.index("checkpoint"), _COLUMNS.index("after_policy")
_EVENT = _COLUMNS.index("event")


class Bytes(Func):
    """A text's size in bytes (PostgreSQL reads it from the value's header: nothing is
    detoasted, whatever its size)."""

    function = "OCTET_LENGTH"
    output_field = IntegerField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler, connection, template="LENGTH(CAST(%(expressions)s AS BLOB))", **extra
        )


class Oversize(Exception):
    """A claim's answer would pass MAX_ANSWER_BYTES: raised inside its transaction (which rolls
    back), so that it is taken again for the first `keep` tasks only."""

    def __init__(self, keep: int) -> None:
        super().__init__(keep)
        self.keep = keep


def _parents_bytes(children: list[int]) -> dict[int, int]:
    """Per child, what its parents add to its delivery (their results are not read)."""
    rows = (
        Dependency.objects.filter(child_id__in=children, key_order=False)
        .values("child_id")
        .annotate(
            size=Sum(Coalesce(Bytes("parent__result"), Value(NULL_BYTES)) + Value(PARENT_BYTES))
        )
        .order_by()
        .values_list("child_id", "size")
    )
    return {child: int(size) for child, size in rows}


def fitting(rows: Sequence[Sequence[Any]]) -> int:
    """How many of the claim rows `rows` (sql.CLAIM_COLUMNS, in claim order) an answer carries:
    each one while the answer has not passed MAX_ANSWER_BYTES before it (so the first always)."""
    if len(rows) <= 1:
        return len(rows)
    waited = [row[_ID] for row in rows if row[_AFTER_POLICY] is not None]
    parents = _parents_bytes(waited) if waited else {}
    size = 0
    for n, row in enumerate(rows):
        if size > MAX_ANSWER_BYTES:
            return n
        checkpoint = row[_CHECKPOINT]
        size += DELIVERY_BYTES + len(row[_PAYLOAD]) + parents.get(row[_ID], 0)
        size += NULL_BYTES if checkpoint is None else len(checkpoint)
        size += NULL_BYTES if row[_EVENT] is None else len(row[_EVENT])
    return len(rows)


def check(rows: Sequence[Sequence[Any]]) -> None:
    """Raise Oversize when an answer would not carry every one of the claimed `rows`."""
    keep = fitting(rows)
    if keep < len(rows):
        raise Oversize(keep)

"""Reports on a held task: progress and checkpoints, a write under the lease (no state change)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from django.db import connection

from broker.exceptions import TaskNotHeld
from broker.queue.base import aware, current_time, storable
from broker.queue.lease import not_held
from broker.states import State


class _Unset:
    """A field the report leaves as it was (null, in a report, clears it)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()


@dataclass(frozen=True, slots=True)
class Report:
    """What one progress report says; UNSET fields keep the task's last value."""

    fraction: float | _Unset | None = UNSET
    message: str | _Unset | None = UNSET
    checkpoint: str | _Unset | None = UNSET  # JSON text, as stored

    def columns(self) -> dict[str, Any]:
        """The task columns this report writes."""
        given = {
            "progress_fraction": self.fraction,
            "progress_message": self.message,
            "checkpoint": self.checkpoint,
        }
        return {column: value for column, value in given.items() if value is not UNSET}


_HANDED_OUT = State.HANDED_OUT.value


def progress(
    task_id: int, *, lease_id: str, report: Report, lease_ms: int | None = None
) -> datetime:
    """Keep the holder's report on its task (and, given `lease_ms`, move the lease's deadline to
    now + lease_ms, as extend does); no state change. Returns the lease's deadline.

    One guarded UPDATE, like extend. Raises TaskNotHeld (404) unless the task is handed out;
    LeaseMismatch (409) if under another lease.
    """
    now = current_time()
    ops = connection.ops
    values = {"progress_at": now, **report.columns()}
    if isinstance(values.get("progress_message"), str):
        values["progress_message"] = storable(values["progress_message"])
    if lease_ms is not None:
        values["lease_deadline"] = now + timedelta(milliseconds=lease_ms)
    params = [
        ops.adapt_datetimefield_value(v) if isinstance(v, datetime) else v for v in values.values()
    ]
    assignments = ", ".join(f'"{column}" = %s' for column in values)
    statement = (
        f'UPDATE "broker_task" SET {assignments} WHERE "id" = %s AND "state" = %s'  # noqa: S608
        ' AND "lease_id" = %s RETURNING "lease_deadline"'
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, [*params, task_id, _HANDED_OUT, storable(lease_id)])
        row = cursor.fetchone()
        if row is None:
            raise not_held(task_id)
    deadline = aware(row[0])
    if deadline is None:  # a handed-out task always has one
        raise TaskNotHeld()
    return deadline

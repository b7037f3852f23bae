"""A message's SQS extras: its deduplication id (FIFO queues) and the system attributes it was
sent with, kept beside its task (SqsMessage) so that the task's payload is the
{"body", "attributes"} API.md promises a native worker. Written in the send's transaction, read by
a receive that asks for them, deleted by the sweeper once their task is gone. Tasks sent before
the extras had a table of their own carry them in the payload; receiving still reads those."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef

from broker.models import SqsMessage, Task

_prune_after = 0  # the task id the sweeper's next prune starts after (per process)


def keep(pk: int, dedup_id: str | None, system: dict[str, Any]) -> SqsMessage | None:
    """The row for a new message's extras (None when it has none), to save in the send's
    transaction."""
    if dedup_id is None and not system:
        return None
    return SqsMessage(task_id=pk, deduplication_id=dedup_id, system_attributes=system)


def save(rows: Sequence[SqsMessage | None]) -> None:
    SqsMessage.objects.bulk_create([row for row in rows if row is not None])


def of(pks: Sequence[int]) -> dict[int, SqsMessage]:
    """The extras of these tasks, by task id (tasks without any are absent)."""
    return {row.task_id: row for row in SqsMessage.objects.filter(task_id__in=list(pks))}


def prune(limit: int = 500) -> int:
    """Delete the extras of tasks that are gone (pruned): `limit` rows a call, walked by task id,
    round and round."""
    global _prune_after
    with transaction.atomic():
        ids = list(
            SqsMessage.objects.filter(task_id__gt=_prune_after)
            .order_by("task_id")
            .values_list("task_id", flat=True)[:limit]
        )
        _prune_after = ids[-1] if len(ids) == limit else 0
        gone = SqsMessage.objects.filter(task_id__in=ids).exclude(
            Exists(Task.objects.filter(pk=OuterRef("task_id")))
        )
        deleted: int = gone.delete()[0]
        return deleted

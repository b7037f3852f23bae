"""FIFO queues' deduplication: a message whose MessageDeduplicationId the queue saw in the last
5 minutes is accepted and not enqueued again; the answer names the first one's task.

Not the enqueue's idempotency_key: that one is kept as long as its task (until retention prunes
it), across every queue, and shows in the native API; SQS forgets an id after 5 minutes and keeps
one per queue. So the ids are SqsDedup rows, claimed in the enqueue's own transaction:

- the rows of a send's ids are inserted (ON CONFLICT DO NOTHING, in id order so two batches never
  deadlock), then read under their locks. A row another sender is inserting makes the insert wait
  for that transaction: once it commits, the row names its task (a duplicate); if it rolls back,
  ours goes in. A row of ours has no task yet; an expired one is taken over.
- the new messages are enqueued and their rows get their task ids, in that same transaction: the
  message and its id commit together or not at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from django.db import transaction

from broker import queue
from broker.models import SqsDedup
from broker.queue import NewTask
from broker.queue.base import current_time
from broker.sqs import limits

# Passes at the rows before giving up: a row can vanish between our insert and our read only when
# the sweeper deleted it (expired) in between, which the next pass sees.
_PASSES = 3


def enqueue_once(name: str, items: Sequence[tuple[NewTask, str]]) -> list[tuple[int, bool]]:
    """Enqueue each (task, deduplication id) into FIFO queue `name` unless its id was seen there
    within the window (or earlier in `items`). Per item: (task id, whether it was enqueued now)."""
    window = timedelta(seconds=limits.DEDUP_WINDOW_S)
    ids = sorted({dedup_id for _, dedup_id in items})
    with transaction.atomic():
        now = current_time()
        rows = _claim(name, ids, now + window)
        first: dict[str, NewTask] = {}
        for spec, dedup_id in items:
            row = rows[dedup_id]
            if (row.task_id is None or row.expires_at <= now) and dedup_id not in first:
                first[dedup_id] = spec
        pks = queue.enqueue_many(list(first.values())) if first else []
        for dedup_id, pk in zip(first, pks, strict=True):
            row = rows[dedup_id]
            row.task_id, row.expires_at = pk, now + window
        SqsDedup.objects.bulk_update([rows[d] for d in first], ["task_id", "expires_at"])
    answers: list[tuple[int, bool]] = []
    for _, dedup_id in items:
        # The first item of an id enqueued it (if anyone did now); the rest repeat it.
        answers.append((_task(rows[dedup_id]), first.pop(dedup_id, None) is not None))
    return answers


def _claim(name: str, ids: list[str], expires_at: object) -> dict[str, SqsDedup]:
    """Insert the ids' rows where missing, then hold every one of them (see the module's doc)."""
    rows: dict[str, SqsDedup] = {}
    for _ in range(_PASSES):
        missing = [dedup_id for dedup_id in ids if dedup_id not in rows]
        SqsDedup.objects.bulk_create(
            [SqsDedup(queue=name, dedup_id=d, task_id=None, expires_at=expires_at)
             for d in missing],
            ignore_conflicts=True,
        )  # fmt: skip
        held = SqsDedup.objects.select_for_update().filter(queue=name, dedup_id__in=missing)
        rows.update((row.dedup_id, row) for row in held.order_by("dedup_id"))
        if len(rows) == len(ids):
            return rows
    raise RuntimeError("deduplication ids kept vanishing")  # pragma: no cover


def _task(row: SqsDedup) -> int:
    assert row.task_id is not None  # noqa: S101 -- set by the transaction that inserted it
    return row.task_id


def forget(name: str) -> None:
    """A deleted queue's ids: a queue made again under its name starts afresh."""
    SqsDedup.objects.filter(queue=name).delete()


def prune(limit: int = 500) -> int:
    """Delete up to `limit` expired ids (the sweeper). Rows a sender holds are skipped: it may be
    taking one over."""
    with transaction.atomic():
        expired = list(
            SqsDedup.objects.select_for_update(skip_locked=True)
            .filter(expires_at__lte=current_time())
            .order_by("expires_at")
            .values_list("pk", flat=True)[:limit]
        )
        if not expired:
            return 0
        deleted: int = SqsDedup.objects.filter(pk__in=expired).delete()[0]
        return deleted

"""A person's moves: requeue out of the dead-letter queue, and cancel."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from broker import observe
from broker.exceptions import InvalidTransition, NotInDeadLetterQueue, TaskNotFound
from broker.models import Task
from broker.queue import counters, dependencies, keys, restricted
from broker.queue.base import MAX_KEPT_ERRORS, current_time
from broker.states import TRANSITIONS, State
from broker.wakeup import announce

_BATCH = 1000


def cancel(task_id: int) -> None:
    """ready, delayed or handed_out → cancelled; a later ack/nack of its lease gets 404.

    Raises TaskNotFound (404) for an unknown task, InvalidTransition (409) once finished or dead.
    """
    sources, target, _ = TRANSITIONS["cancel"]
    with transaction.atomic():
        dependencies.lock_for_cancel([task_id])
        dependencies.hold_turns([task_id])
        # Read (and lock) first: the 404/409 decision and the log line both need the old state.
        row = (
            Task.objects.select_for_update()
            .filter(pk=task_id)
            .values_list("state", "queue", "attempts")
            .first()
        )
        if row is None:
            raise TaskNotFound()
        state, queue_name, attempts = row
        if state not in sources:
            raise InvalidTransition(f"The task is already {state}.")
        now = current_time()
        Task.objects.filter(pk=task_id).update(**_ending_lease(target, now))
        dependencies.after_finish({task_id: target}, now)  # the cascade, in this transaction
        # The counter rows after every task lock (dependencies: lock order).
        counters.bump(counters.count_moves(("cancel",), [(queue_name, state, target)]))
        if state == State.HANDED_OUT:
            restricted.wake_freed({queue_name: 1})
    observe.moved(state, target, task=task_id, queue=queue_name, attempts=attempts)


def cancel_many(task_ids: Iterable[int]) -> int:
    """Cancel every cancellable task among `task_ids`, in batches; returns how many moved."""
    return _move_many(task_ids, "cancel", {})


def cancel_queue(queue_name: str) -> int:
    """Cancel every ready, delayed or handed-out task of a queue enqueued before the call (SQS's
    PurgeQueue), _BATCH per transaction; returns how many moved. Dead tasks stay in the DLQ."""
    sources = TRANSITIONS["cancel"][0]
    started = current_time()
    moved = 0
    while True:
        ids = list(
            Task.objects.filter(queue=queue_name, state__in=sources, created_at__lte=started)
            .order_by()
            .values_list("pk", flat=True)[:_BATCH]
        )
        if not ids:
            return moved
        moved += _move_many(ids, "cancel", {})


def requeue(task_id: int) -> None:
    """dead → ready with attempts reset and last error cleared (the newest errors stay).

    Raises NotInDeadLetterQueue (404) if the task is not in the DLQ.
    """
    if not requeue_many([task_id]):
        raise NotInDeadLetterQueue()


def requeue_many(task_ids: Iterable[int]) -> int:
    """Requeue every dead task among `task_ids`, in batches; returns how many moved."""
    return _move_many(task_ids, "requeue", {"attempts": 0, "last_error": None})


def discard_many(task_ids: Iterable[int]) -> int:
    """dead → cancelled: the dead tasks among `task_ids` are dropped from the DLQ for good (their
    dependants as a cancel's); returns how many moved."""
    return _move_many(task_ids, "discard", {})


def _ending_lease(target: str, now: datetime) -> dict[str, Any]:
    return {
        "state": target,
        "lease_id": None,
        "lease_deadline": None,
        "worker": None,
        "updated_at": now,
    }


def _move_many(task_ids: Iterable[int], event: str, changes: dict[str, Any]) -> int:
    """Move the tasks among `task_ids` that `event` may move, _BATCH per transaction."""
    sources, target, _ = TRANSITIONS[event]
    ids = list(task_ids)
    moved = 0
    for start in range(0, len(ids), _BATCH):
        chunk = ids[start : start + _BATCH]
        with transaction.atomic():
            if target == TRANSITIONS["cancel"][1]:
                dependencies.lock_for_cancel(chunk)
                dependencies.hold_turns(chunk)
            rows = list(
                Task.objects.select_for_update()
                .filter(pk__in=chunk, state__in=sources)
                .order_by("pk")
                .values_list("pk", "queue", "state")
            )
            if not rows:
                continue
            now = current_time()
            update = {**_ending_lease(target, now), **changes}
            if target == State.READY:
                update["available_at"] = now
            Task.objects.filter(pk__in=[pk for pk, _, _ in rows]).update(**update)
            if target == TRANSITIONS["cancel"][1]:
                dependencies.after_finish({pk: target for pk, _, _ in rows}, now)
            # The counter rows after every task lock (dependencies: lock order).
            counters.bump(counters.count_moves((event,), [(q, s, target) for _, q, s in rows]))
            if event == "requeue":
                trim_errors([pk for pk, _, _ in rows])
                keys.requeued([pk for pk, _, _ in rows])  # the end of their key's line
            restricted.wake_freed(Counter(q for _, q, s in rows if s == State.HANDED_OUT))
            if target == State.READY:
                # Each queue's own claimers: a wake for another queue's would be lost on them.
                announce(Counter(q for _, q, _ in rows))
        observe.moved(
            "|".join(sorted(sources)),
            target,
            task=rows[0][0] if len(rows) == 1 else None,
            count=len(rows),
        )
        moved += len(rows)
    return moved


_TRIM = (
    'DELETE FROM "broker_taskerror" WHERE "id" IN (SELECT "id" FROM ('
    'SELECT "id", row_number() OVER (PARTITION BY "task_id" ORDER BY "id" DESC) AS "n"'
    ' FROM "broker_taskerror" WHERE "task_id" IN ({ids})) AS "ranked" WHERE "n" > %s)'
)


def trim_errors(task_ids: list[int]) -> None:
    """Keep each task's newest MAX_KEPT_ERRORS errors."""
    with connection.cursor() as cursor:
        cursor.execute(
            _TRIM.format(ids=", ".join(["%s"] * len(task_ids))), [*task_ids, MAX_KEPT_ERRORS]
        )

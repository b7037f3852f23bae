"""The task state machine: the only code that changes a task's state, attempts or lease.

Every function is one transaction that moves the task(s) and the lifetime counters together, so
`nacked + reclaimed == retried + buried` holds at every instant, whoever calls (views, the sweeper,
admin, tests).
"""
from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, F, Sum
from django.utils import timezone

from broker.exceptions import InvalidTransition, LeaseMismatch, TaskNotFound
from broker.models import COUNTER_SHARDS, CounterShard, Task, TaskError
from broker.states import COUNTERS, GAUGE_STATES, State, backoff_ms
from broker.wakeup import ANY_QUEUE, announce

LEASE_EXPIRED = "lease expired"
NO_ERROR_GIVEN = "nacked without an error message"
_UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class NewTask:
    """What an enqueue asks for, already validated."""

    payload: str  # JSON text
    max_attempts: int = 3
    delay_ms: int = 0
    queue: str = "default"
    priority: int = 1
    type: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class Delivery:
    """A claimed task and the lease it is held under."""

    task: Task
    lease_id: str
    deadline: datetime


def _bump(**deltas: int) -> None:
    """Move lifetime counters; call inside the transaction that moves the tasks."""
    deltas = {name: n for name, n in deltas.items() if n}
    if deltas:
        shard = random.randrange(COUNTER_SHARDS)  # noqa: S311 -- spreads row locks, not secret
        changes = {name: F(name) + n for name, n in deltas.items()}
        if not CounterShard.objects.filter(shard=shard).update(**changes):
            # First use of this shard (a new or flushed database); ON CONFLICT DO NOTHING keeps
            # a racing creator from aborting our transaction.
            CounterShard.objects.bulk_create([CounterShard(shard=shard)], ignore_conflicts=True)
            CounterShard.objects.filter(shard=shard).update(**changes)


def _why_not_held(task_id: int, lease_id: str) -> Exception:
    """The error for an ack/nack/extend whose guarded update matched no row."""
    state = Task.objects.filter(pk=task_id).values_list("state", flat=True).first()
    if state == State.HANDED_OUT:
        return LeaseMismatch()
    return TaskNotFound("The task is not handed out (unknown, reclaimed, cancelled or finished).")


def _retry_delay(attempts: int) -> timedelta:
    return timedelta(
        milliseconds=backoff_ms(
            attempts, settings.BROKER_RETRY_BASE_MS, settings.BROKER_RETRY_MAX_MS
        )
    )


# -- enqueue ----------------------------------------------------------------------------------


def _new_row(spec: NewTask, now: datetime) -> Task:
    delayed = spec.delay_ms > 0
    return Task(
        state=State.DELAYED if delayed else State.READY,
        queue=spec.queue,
        priority=spec.priority,
        type=spec.type,
        payload=spec.payload,
        max_attempts=spec.max_attempts,
        available_at=now + timedelta(milliseconds=spec.delay_ms) if delayed else now,
        idempotency_key=spec.idempotency_key,
        created_at=now,
        updated_at=now,
    )


def enqueue(spec: NewTask) -> tuple[int, bool]:
    """Store a new task: → ready, or → delayed when delay_ms > 0.

    Returns (id, created). With an idempotency key already kept, nothing is created and the first
    task's id comes back with created False; the unique index decides, so racing posts agree.
    """
    for _ in range(3):
        try:
            with transaction.atomic():
                row = _new_row(spec, timezone.now())
                row.save(force_insert=True)
                _bump(enqueued=1)
                if row.state == State.READY:
                    announce({row.queue: 1})
                return row.pk, True
        except IntegrityError:
            if spec.idempotency_key is None:
                raise
            existing = (
                Task.objects.filter(idempotency_key=spec.idempotency_key)
                .values_list("pk", flat=True)
                .first()
            )
            if existing is not None:
                return existing, False
            # The holder of the key was deleted between our insert and our read: try again.
    raise IntegrityError("idempotency key kept changing hands")


def enqueue_many(specs: list[NewTask]) -> list[int]:
    """Store many tasks in one transaction, all or nothing; returns their ids in order."""
    now = timezone.now()
    rows = [_new_row(spec, now) for spec in specs]
    with transaction.atomic():
        Task.objects.bulk_create(rows)
        _bump(enqueued=len(rows))
        announce(Counter(r.queue for r in rows if r.state == State.READY))
    return [r.pk for r in rows]


# -- claim, ack, nack, extend -----------------------------------------------------------------


def claim(
    queues: list[str] | None, lease_ms: int, limit: int = 1, worker: str | None = None
) -> list[Delivery]:
    """Hand out up to `limit` ready tasks, priority then oldest first: ready → handed_out.

    On PostgreSQL, SKIP LOCKED lets concurrent claimers pass each other's rows instead of waiting;
    on SQLite the IMMEDIATE transaction holds the write lock from BEGIN.
    """
    with transaction.atomic():
        rows = list(Task.objects.ready(queues).claim_order().lock_skipping_locked()[:limit])
        if not rows:
            return []
        now = timezone.now()
        lease_id = uuid.uuid4().hex
        deadline = now + timedelta(milliseconds=lease_ms)
        Task.objects.filter(pk__in=[r.pk for r in rows]).update(
            state=State.HANDED_OUT,
            attempts=F("attempts") + 1,
            lease_id=lease_id,
            lease_deadline=deadline,
            claimed_at=now,
            worker=worker,
            updated_at=now,
        )
        _bump(delivered=len(rows))
    for row in rows:
        row.state, row.attempts, row.lease_id = State.HANDED_OUT, row.attempts + 1, lease_id
        row.lease_deadline, row.claimed_at, row.worker, row.updated_at = deadline, now, worker, now
    return [Delivery(row, lease_id, deadline) for row in rows]


def ack(task_id: int, *, lease_id: str, result: Any = None) -> None:
    """handed_out → done, keeping `result`.

    Raises TaskNotFound (404) unless the task is handed out; LeaseMismatch (409) if under
    another lease.
    """
    with transaction.atomic():
        moved = Task.objects.filter(
            pk=task_id, state=State.HANDED_OUT, lease_id=lease_id
        ).update(
            state=State.DONE,
            result=None if result is None else json.dumps(result),
            lease_id=None,
            lease_deadline=None,
            worker=None,
            updated_at=timezone.now(),
        )
        if not moved:
            raise _why_not_held(task_id, lease_id)
        _bump(acked=1)


def nack(task_id: int, *, lease_id: str, error: str | None = None) -> State:
    """handed_out → delayed (backoff) while attempts are left, else → dead; keeps the error.

    Returns the new state. Raises TaskNotFound (404) or LeaseMismatch (409) as ack does.
    """
    error = error if error else NO_ERROR_GIVEN
    with transaction.atomic():
        row = (
            Task.objects.select_for_update()
            .filter(pk=task_id, state=State.HANDED_OUT, lease_id=lease_id)
            .values_list("attempts", "max_attempts")
            .first()
        )
        if row is None:
            raise _why_not_held(task_id, lease_id)
        attempts, max_attempts = row
        now = timezone.now()
        retry = attempts < max_attempts
        Task.objects.filter(pk=task_id).update(
            state=State.DELAYED if retry else State.DEAD,
            available_at=now + _retry_delay(attempts) if retry else F("available_at"),
            last_error=error,
            lease_id=None,
            lease_deadline=None,
            worker=None,
            updated_at=now,
        )
        TaskError.objects.create(task_id=task_id, attempt=attempts, at=now, error=error)
        _bump(nacked=1, retried=int(retry), buried=int(not retry))
    return State.DELAYED if retry else State.DEAD


def extend(task_id: int, *, lease_id: str, lease_ms: int) -> datetime:
    """Move a held lease's deadline to now + lease_ms; no state change. Raises as ack does."""
    deadline = timezone.now() + timedelta(milliseconds=lease_ms)
    moved = Task.objects.filter(pk=task_id, state=State.HANDED_OUT, lease_id=lease_id).update(
        lease_deadline=deadline
    )
    if not moved:
        raise _why_not_held(task_id, lease_id)
    return deadline


# -- cancel, requeue --------------------------------------------------------------------------

_CANCELLABLE = (State.READY, State.DELAYED, State.HANDED_OUT)


def cancel(task_id: int) -> None:
    """ready, delayed or handed_out → cancelled; a later ack/nack of its lease gets 404.

    Raises TaskNotFound (404) for an unknown task, InvalidTransition (409) once finished or dead.
    """
    with transaction.atomic():
        moved = Task.objects.filter(pk=task_id, state__in=_CANCELLABLE).update(
            state=State.CANCELLED,
            lease_id=None,
            lease_deadline=None,
            worker=None,
            updated_at=timezone.now(),
        )
        if not moved:
            state = Task.objects.filter(pk=task_id).values_list("state", flat=True).first()
            if state is None:
                raise TaskNotFound("No such task.")
            raise InvalidTransition(f"The task is already {state}.")
        _bump(cancelled=1)


def cancel_many(task_ids: Iterable[int]) -> int:
    """Cancel every cancellable task among `task_ids`, in batches; returns how many moved."""
    return _move_many(task_ids, _CANCELLABLE, "cancelled", dict(state=State.CANCELLED))


def requeue(task_id: int) -> None:
    """dead → ready with attempts reset and last error cleared (the history stays).

    Raises TaskNotFound (404) if the task is not in the DLQ.
    """
    if not requeue_many([task_id]):
        raise TaskNotFound("The task is not in the dead-letter queue.")


def requeue_many(task_ids: Iterable[int]) -> int:
    """Requeue every dead task among `task_ids`, in batches; returns how many moved."""
    return _move_many(
        task_ids,
        (State.DEAD,),
        "requeued",
        dict(state=State.READY, attempts=0, last_error=None),
        becomes_ready=True,
    )


_BATCH = 1000


def _move_many(
    task_ids: Iterable[int],
    from_states: tuple[str, ...],
    counter: str,
    changes: dict[str, Any],
    *,
    becomes_ready: bool = False,
) -> int:
    ids = list(task_ids)
    moved = 0
    for start in range(0, len(ids), _BATCH):
        chunk = ids[start : start + _BATCH]
        now = timezone.now()
        extra = dict(available_at=now) if becomes_ready else {}
        with transaction.atomic():
            n = Task.objects.filter(pk__in=chunk, state__in=from_states).update(
                **changes, **extra, lease_id=None, lease_deadline=None, worker=None, updated_at=now
            )
            _bump(**{counter: n})
            if becomes_ready:
                announce({ANY_QUEUE: n} if n else {})
        moved += n
    return moved


# -- the sweeper's moves ----------------------------------------------------------------------


def reclaim_expired(limit: int = 500) -> int:
    """Handed-out tasks whose lease expired → delayed (backoff) or dead, error "lease expired".

    Locks with SKIP LOCKED, so two sweepers never move the same task. Returns how many moved.
    """
    with transaction.atomic():
        now = timezone.now()
        rows = list(
            Task.objects.expired(now)
            .order_by("lease_deadline")
            .lock_skipping_locked()
            .only("pk", "attempts", "max_attempts", "available_at")[:limit]
        )
        if not rows:
            return 0
        retried = 0
        for row in rows:
            retry = row.attempts < row.max_attempts
            retried += retry
            row.state = State.DELAYED if retry else State.DEAD
            if retry:
                row.available_at = now + _retry_delay(row.attempts)
            row.last_error = LEASE_EXPIRED
            row.lease_id = row.lease_deadline = row.worker = None
            row.updated_at = now
        Task.objects.bulk_update(
            rows,
            ["state", "available_at", "last_error", "lease_id", "lease_deadline", "worker",
             "updated_at"],
        )
        TaskError.objects.bulk_create(
            TaskError(task_id=row.pk, attempt=row.attempts, at=now, error=LEASE_EXPIRED)
            for row in rows
        )
        _bump(reclaimed=len(rows), retried=retried, buried=len(rows) - retried)
    return len(rows)


def promote_delayed(limit: int = 1000) -> int:
    """Delayed tasks whose time has come → ready, waking claimers. Returns how many moved."""
    with transaction.atomic():
        now = timezone.now()
        rows = list(
            Task.objects.due(now)
            .order_by("available_at")
            .lock_skipping_locked()
            .values_list("pk", "queue")[:limit]
        )
        if not rows:
            return 0
        Task.objects.filter(pk__in=[pk for pk, _ in rows]).update(
            state=State.READY, updated_at=now
        )
        announce(Counter(queue for _, queue in rows))
    return len(rows)


# -- reading ----------------------------------------------------------------------------------


def totals() -> dict[str, int]:
    """The lifetime counters, summed over their shards."""
    sums = CounterShard.objects.aggregate(**{name: Sum(name) for name in COUNTERS})
    return {name: sums[name] or 0 for name in COUNTERS}


def gauges() -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Tasks in each live state now, overall and per queue."""
    overall = {state.value: 0 for state in GAUGE_STATES}
    per_queue: dict[str, dict[str, int]] = {}
    rows = (
        Task.objects.filter(state__in=GAUGE_STATES)
        .values_list("queue", "state")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for queue, state, n in rows:
        overall[state] += n
        per_queue.setdefault(queue, {s.value: 0 for s in GAUGE_STATES})[state] = n
    return overall, per_queue

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
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Sum
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from broker import observe, pgsql
from broker.exceptions import InvalidTransition, LeaseMismatch, TaskNotFound
from broker.models import COUNTER_SHARDS, CounterShard, Task, TaskError
from broker.states import COUNTERS, FINISHED_STATES, GAUGE_STATES, State, backoff_ms
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


def _kept_error(error: str | None) -> str:
    """A nack's error as stored (see _storable)."""
    return _storable(error) if error else NO_ERROR_GIVEN


def _storable(text: str) -> str:
    """Text a PostgreSQL text column takes: U+0000 and lone surrogates (JSON can carry both)
    become U+FFFD. A lease id so changed still matches no lease, as it did not before."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


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
    if connection.vendor == "postgresql":
        return _enqueue_pg(spec)
    for _ in range(3):
        try:
            with transaction.atomic():
                row = _new_row(spec, timezone.now())
                row.save(force_insert=True)
                _bump(enqueued=1)
                if row.state == State.READY:
                    announce({row.queue: 1})
            observe.moved("new", row.state, task=row.pk, queue=row.queue, attempts=0)
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


def _enqueue_pg(spec: NewTask) -> tuple[int, bool]:
    """enqueue() on PostgreSQL: insert, count and NOTIFY in one statement (pgsql.ENQUEUE)."""
    row = _new_row(spec, timezone.now())
    params = {f.column: getattr(row, f.attname) for f in Task._meta.concrete_fields}
    params["shard"] = random.randrange(COUNTER_SHARDS)  # noqa: S311
    with connection.cursor() as cursor:
        for _ in range(3):
            cursor.execute(pgsql.ENQUEUE, params)
            got = cursor.fetchone()
            if got is not None:
                observe.moved("new", row.state, task=got[0], queue=row.queue, attempts=0)
                return got[0], True
            # ON CONFLICT DO NOTHING: the key is kept by another task.
            cursor.execute(
                "SELECT id FROM broker_task WHERE idempotency_key = %s", [spec.idempotency_key]
            )
            existing = cursor.fetchone()
            if existing is not None:
                return existing[0], False
    raise IntegrityError("idempotency key kept changing hands")


def _enqueue_many_pg(specs: list[NewTask]) -> list[int]:
    """enqueue_many() on PostgreSQL without keys: insert, count and NOTIFY in one statement."""
    now = timezone.now()
    rows = [_new_row(spec, now) for spec in specs]
    params = {
        "now": now,
        "state": [r.state for r in rows],
        "queue": [r.queue for r in rows],
        "priority": [r.priority for r in rows],
        "type": [r.type for r in rows],
        "payload": [r.payload for r in rows],
        "max_attempts": [r.max_attempts for r in rows],
        "available_at": [r.available_at for r in rows],
        "shard": random.randrange(COUNTER_SHARDS),  # noqa: S311
    }
    with connection.cursor() as cursor:
        cursor.execute(pgsql.ENQUEUE_MANY, params)
        ids = [row[0] for row in cursor.fetchall()]
    for state, n in Counter(r.state for r in rows).items():
        observe.moved("new", state, count=n)
    return ids


def enqueue_many(specs: list[NewTask]) -> list[int]:
    """Store many tasks in one transaction, all or nothing; returns their ids in order.

    An item whose idempotency key is already kept (or repeats an earlier item's) gets that
    task's id and creates nothing, as a single enqueue would.
    """
    keys = {spec.idempotency_key for spec in specs if spec.idempotency_key is not None}
    if not keys and connection.vendor == "postgresql":
        return _enqueue_many_pg(specs)
    for _ in range(3):
        try:
            with transaction.atomic():
                kept = dict(
                    Task.objects.filter(idempotency_key__in=keys).values_list(
                        "idempotency_key", "pk"
                    )
                ) if keys else {}
                now = timezone.now()
                rows: list[Task] = []
                slots: list[Task | int] = []
                by_key: dict[str, Task] = {}
                for spec in specs:
                    key = spec.idempotency_key
                    if key in kept:
                        slots.append(kept[key])
                    elif key is not None and key in by_key:
                        slots.append(by_key[key])
                    else:
                        row = _new_row(spec, now)
                        rows.append(row)
                        slots.append(row)
                        if key is not None:
                            by_key[key] = row
                Task.objects.bulk_create(rows)
                _bump(enqueued=len(rows))
                announce(Counter(r.queue for r in rows if r.state == State.READY))
        except IntegrityError:
            if not keys:
                raise
            continue  # a racing enqueue took one of the keys: look again
        for state, n in Counter(r.state for r in rows).items():
            observe.moved("new", state, count=n)
        return [slot if isinstance(slot, int) else slot.pk for slot in slots]
    raise IntegrityError("idempotency keys kept changing hands")


# -- claim, ack, nack, extend -----------------------------------------------------------------


def claim(
    queues: list[str] | None, lease_ms: int, limit: int = 1, worker: str | None = None
) -> list[Delivery]:
    """Hand out up to `limit` ready tasks, priority then oldest first: ready → handed_out.

    On PostgreSQL, SKIP LOCKED lets concurrent claimers pass each other's rows instead of waiting;
    on SQLite the IMMEDIATE transaction holds the write lock from BEGIN.
    """
    if connection.vendor == "postgresql":
        return _claim_pg(queues, lease_ms, limit, worker)
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
    _log_claim(rows)
    return [Delivery(row, lease_id, deadline) for row in rows]


def _claim_pg(
    queues: list[str] | None, lease_ms: int, limit: int, worker: str | None
) -> list[Delivery]:
    """claim() on PostgreSQL: pick, hand out and count in one statement (pgsql.CLAIM_*)."""
    now = timezone.now()
    lease_id = uuid.uuid4().hex
    deadline = now + timedelta(milliseconds=lease_ms)
    params = {
        "queues": queues, "queue": queues[0] if queues else None,
        "limit": limit, "lease_id": lease_id, "deadline": deadline,
        "now": now, "worker": worker, "shard": random.randrange(COUNTER_SHARDS),  # noqa: S311
    }
    with connection.cursor() as cursor:
        if not queues:
            sql = pgsql.CLAIM_ANY
        else:
            sql = pgsql.CLAIM_ONE_QUEUE if len(queues) == 1 else pgsql.CLAIM_QUEUES
        cursor.execute(sql, params)
        found = cursor.fetchall()
    if not found:
        return []
    rows = [
        Task(
            pk=pk, state=State.HANDED_OUT, payload=payload, attempts=attempts,
            max_attempts=max_attempts, queue=queue_name, priority=priority, type=type_,
            created_at=created_at, available_at=available_at, lease_id=lease_id,
            lease_deadline=deadline, claimed_at=now, worker=worker, updated_at=now,
        )
        for pk, payload, attempts, max_attempts, queue_name, priority, type_, created_at,
        available_at in found
    ]
    _log_claim(rows)
    return [Delivery(row, lease_id, deadline) for row in rows]


def _log_claim(rows: list[Task]) -> None:
    if len(rows) == 1:
        first = rows[0]
        observe.moved(State.READY, State.HANDED_OUT, task=first.pk, queue=first.queue,
                      attempts=first.attempts)
    else:
        observe.moved(State.READY, State.HANDED_OUT, count=len(rows))


def ack(task_id: int, *, lease_id: str, result: Any = None) -> None:
    """handed_out → done, keeping `result`.

    Raises TaskNotFound (404) unless the task is handed out; LeaseMismatch (409) if under
    another lease.
    """
    now = timezone.now()
    lease_id = _storable(lease_id)
    if connection.vendor == "postgresql":
        return _ack_pg(task_id, lease_id, result, now)
    with transaction.atomic():
        row = _ack_returning(task_id, lease_id, None if result is None else json.dumps(result), now)
        if row is None:
            raise _why_not_held(task_id, lease_id)
        queue_name, attempts, claimed_at = row
        _bump(acked=1, **observe.duration_deltas(_aware(claimed_at), now))
    observe.moved(State.HANDED_OUT, State.DONE, task=task_id, queue=queue_name, attempts=attempts)


def _ack_pg(task_id: int, lease_id: str, result: Any, now: datetime) -> None:
    """ack() on PostgreSQL: move, count and time in one statement (pgsql.ACK)."""
    params = {
        "id": task_id, "lease_id": lease_id, "now": now,
        "result": None if result is None else json.dumps(result),
        "shard": random.randrange(COUNTER_SHARDS),  # noqa: S311
    }
    with connection.cursor() as cursor:
        cursor.execute(pgsql.ACK, params)
        row = cursor.fetchone()
    if row is None:
        raise _why_not_held(task_id, lease_id)
    observe.moved(State.HANDED_OUT, State.DONE, task=task_id, queue=row[0], attempts=row[1])


# Identifiers double-quoted: the same text for PostgreSQL and SQLite.
_ACK_SQL = (
    'UPDATE "broker_task" SET "state" = %s, "result" = %s, "lease_id" = NULL, '
    '"lease_deadline" = NULL, "worker" = NULL, "updated_at" = %s '
    'WHERE "id" = %s AND "state" = %s AND "lease_id" = %s '
    'RETURNING "queue", "attempts", "claimed_at"'
)


def _ack_returning(
    task_id: int, lease_id: str, result: str | None, now: datetime
) -> tuple[str, int, Any] | None:
    """The guarded ack UPDATE, RETURNING what the histogram and the log need.

    Raw SQL because QuerySet.update() cannot return columns, and a SELECT first would cost the
    hot path a round trip. PostgreSQL and SQLite >= 3.35 both speak RETURNING.
    """
    params = [
        State.DONE.value, result, connection.ops.adapt_datetimefield_value(now),
        task_id, State.HANDED_OUT.value, lease_id,
    ]
    with connection.cursor() as cursor:
        cursor.execute(_ACK_SQL, params)
        return cursor.fetchone()


def _aware(value: Any) -> datetime | None:
    """A datetime column read by raw SQL: SQLite hands back text, PostgreSQL an aware value."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)  # Django keeps SQLite datetimes as naive UTC
    return value


def nack(task_id: int, *, lease_id: str, error: str | None = None) -> State:
    """handed_out → delayed (backoff) while attempts are left, else → dead; keeps the error.

    Returns the new state. Raises TaskNotFound (404) or LeaseMismatch (409) as ack does.
    """
    error, lease_id = _kept_error(error), _storable(lease_id)
    with transaction.atomic():
        row = (
            Task.objects.select_for_update()
            .filter(pk=task_id, state=State.HANDED_OUT, lease_id=lease_id)
            .values_list("attempts", "max_attempts", "queue", "claimed_at")
            .first()
        )
        if row is None:
            raise _why_not_held(task_id, lease_id)
        attempts, max_attempts, queue_name, claimed_at = row
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
        _bump(
            nacked=1,
            retried=int(retry),
            buried=int(not retry),
            **observe.duration_deltas(claimed_at, now),
        )
    target = State.DELAYED if retry else State.DEAD
    observe.moved(State.HANDED_OUT, target, task=task_id, queue=queue_name, attempts=attempts)
    return target


def extend(task_id: int, *, lease_id: str, lease_ms: int) -> datetime:
    """Move a held lease's deadline to now + lease_ms; no state change. Raises as ack does."""
    deadline = timezone.now() + timedelta(milliseconds=lease_ms)
    lease_id = _storable(lease_id)
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
        # Read (and lock) first: the 404/409 decision and the log line both need the old state.
        row = (
            Task.objects.select_for_update()
            .filter(pk=task_id)
            .values_list("state", "queue", "attempts")
            .first()
        )
        if row is None:
            raise TaskNotFound("No such task.")
        state, queue_name, attempts = row
        if state not in _CANCELLABLE:
            raise InvalidTransition(f"The task is already {state}.")
        Task.objects.filter(pk=task_id).update(
            state=State.CANCELLED,
            lease_id=None,
            lease_deadline=None,
            worker=None,
            updated_at=timezone.now(),
        )
        _bump(cancelled=1)
    observe.moved(state, State.CANCELLED, task=task_id, queue=queue_name, attempts=attempts)


def cancel_many(task_ids: Iterable[int]) -> int:
    """Cancel every cancellable task among `task_ids`, in batches; returns how many moved."""
    return _move_many(task_ids, _CANCELLABLE, "cancelled", {"state": State.CANCELLED})


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
        {"state": State.READY, "attempts": 0, "last_error": None},
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
        extra = {"available_at": now} if becomes_ready else {}
        with transaction.atomic():
            n = Task.objects.filter(pk__in=chunk, state__in=from_states).update(
                **changes, **extra, lease_id=None, lease_deadline=None, worker=None, updated_at=now
            )
            _bump(**{counter: n})
            if becomes_ready:
                announce({ANY_QUEUE: n} if n else {})
        observe.moved(
            "|".join(from_states),
            changes["state"],
            task=chunk[0] if len(chunk) == 1 else None,
            count=n,
        )
        moved += n
    return moved


# -- the sweeper's moves ----------------------------------------------------------------------


# One statement text, many rows: psycopg pipelines executemany and SQLite runs it in-process,
# where Django's bulk_update builds a CASE per row and column (0.8 s for 100 rows, profiled).
_SETTLE_SQL = (
    'UPDATE "broker_task" SET "state" = %s, "available_at" = COALESCE(%s, "available_at"), '
    '"last_error" = COALESCE(%s, "last_error"), "result" = COALESCE(%s, "result"), '
    '"lease_id" = NULL, "lease_deadline" = NULL, '
    '"worker" = NULL, "updated_at" = %s WHERE "id" = %s'
)


def _settle(rows: list[Task], now: datetime) -> None:
    """Write each row's state and, where set, its available_at, last_error and result; the
    lease ends."""
    ops = connection.ops
    at = ops.adapt_datetimefield_value(now)
    params = [
        (
            row.state,
            ops.adapt_datetimefield_value(row.available_at) if row.available_at else None,
            row.last_error,
            row.result,
            at,
            row.pk,
        )
        for row in rows
    ]
    with connection.cursor() as cursor:
        cursor.executemany(_SETTLE_SQL, params)


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
            .only("pk", "queue", "attempts", "max_attempts", "available_at")[:limit]
        )
        if not rows:
            return 0
        retried = 0
        for row in rows:
            retry = row.attempts < row.max_attempts
            retried += retry
            row.state = State.DELAYED if retry else State.DEAD
            row.available_at = now + _retry_delay(row.attempts) if retry else None
            row.last_error = LEASE_EXPIRED
            row.result = None
        _settle(rows, now)
        TaskError.objects.bulk_create(
            TaskError(task_id=row.pk, attempt=row.attempts, at=now, error=LEASE_EXPIRED)
            for row in rows
        )
        _bump(reclaimed=len(rows), retried=retried, buried=len(rows) - retried)
    if len(rows) == 1:
        observe.moved(State.HANDED_OUT, rows[0].state, task=rows[0].pk, queue=rows[0].queue,
                      attempts=rows[0].attempts)
    else:
        observe.moved(State.HANDED_OUT, State.DELAYED, count=retried)
        observe.moved(State.HANDED_OUT, State.DEAD, count=len(rows) - retried)
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
    if len(rows) == 1:
        observe.moved(State.DELAYED, State.READY, task=rows[0][0], queue=rows[0][1])
    else:
        observe.moved(State.DELAYED, State.READY, count=len(rows))
    return len(rows)


def prune_finished(older_than: datetime, limit: int = 500) -> int:
    """Delete up to `limit` done or cancelled tasks last moved before `older_than`, with their
    error history. Returns how many were deleted.

    Not a transition: no counter moves (the lifetime totals go on counting what was pruned).
    Dead tasks are never pruned: they wait for a person. SKIP LOCKED and a small `limit` keep
    each batch a short transaction that never waits for, nor long blocks, anyone else.
    """
    with transaction.atomic():
        ids = list(
            Task.objects.filter(state__in=FINISHED_STATES, updated_at__lt=older_than)
            .order_by("updated_at")  # served by task_finished_idx
            .lock_skipping_locked()
            .values_list("pk", flat=True)[:limit]
        )
        if ids:
            # only("pk"): the cascade to TaskError needs the ids, not the payloads.
            Task.objects.filter(pk__in=ids).only("pk").delete()
    return len(ids)


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


# -- batches ----------------------------------------------------------------------------------

Settle = tuple[int | None, str, Any]  # (task id or None when it cannot exist, lease id, extra)


def _held_for_settling(items: list[Settle]) -> dict[int, tuple]:
    """Lock the handed-out tasks among `items`, in id order so two batches never deadlock."""
    ids = sorted({pk for pk, _, _ in items if pk is not None})
    rows = (
        Task.objects.select_for_update()
        .filter(pk__in=ids, state=State.HANDED_OUT)
        .order_by("pk")
        .values_list("pk", "lease_id", "attempts", "max_attempts", "queue", "claimed_at")
    )
    return {row[0]: row for row in rows}


def _settle_status(held: dict[int, tuple], pk: int | None, lease_id: str, done: set[int]) -> int:
    row = held.get(pk) if pk is not None else None
    if row is None or pk in done:
        return 404
    return 204 if row[1] == lease_id else 409


def ack_many(items: list[Settle]) -> list[int]:
    """Ack many tasks in one transaction; each item's status is what its single ack answers."""
    statuses: list[int] = []
    with transaction.atomic():
        held = _held_for_settling(items)
        now = timezone.now()
        done: set[int] = set()
        rows: list[Task] = []
        deltas: Counter[str] = Counter()
        for pk, lease_id, result in items:
            status = _settle_status(held, pk, lease_id, done)
            statuses.append(status)
            if status == 204:
                done.add(pk)
                rows.append(Task(
                    pk=pk, state=State.DONE, result=None if result is None else json.dumps(result),
                    lease_id=None, lease_deadline=None, worker=None, updated_at=now,
                ))
                deltas.update(observe.duration_deltas(_aware(held[pk][5]), now))
        if rows:
            _settle(rows, now)
            _bump(acked=len(rows), **deltas)
    observe.moved(State.HANDED_OUT, State.DONE, count=len(rows))
    return statuses


def nack_many(items: list[Settle]) -> list[int]:
    """Nack many tasks in one transaction; each item's status is what its single nack answers."""
    statuses: list[int] = []
    with transaction.atomic():
        held = _held_for_settling(items)
        now = timezone.now()
        done: set[int] = set()
        rows: list[Task] = []
        errors: list[TaskError] = []
        deltas: Counter[str] = Counter()
        retried = 0
        for pk, lease_id, error in items:
            status = _settle_status(held, pk, lease_id, done)
            statuses.append(status)
            if status != 204:
                continue
            done.add(pk)
            _, _, attempts, max_attempts, _, claimed_at = held[pk]
            retry = attempts < max_attempts
            retried += retry
            error = _kept_error(error)
            row = Task(
                pk=pk, state=State.DELAYED if retry else State.DEAD, last_error=error,
                lease_id=None, lease_deadline=None, worker=None, updated_at=now,
            )
            rows.append(row)
            errors.append(TaskError(task_id=pk, attempt=attempts, at=now, error=error))
            deltas.update(observe.duration_deltas(_aware(claimed_at), now))
        for row in rows:
            if row.state == State.DELAYED:
                row.available_at = now + _retry_delay(held[row.pk][2])
        if rows:
            _settle(rows, now)
            TaskError.objects.bulk_create(errors)
            _bump(nacked=len(rows), retried=retried, buried=len(rows) - retried, **deltas)
    observe.moved(State.HANDED_OUT, State.DELAYED, count=retried)
    observe.moved(State.HANDED_OUT, State.DEAD, count=len(rows) - retried)
    return statuses

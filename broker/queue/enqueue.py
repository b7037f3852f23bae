"""Enqueue: new tasks → ready, or → delayed when they ask for a delay."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction

from broker import observe
from broker.models import Task
from broker.queue import counters, sql
from broker.queue.base import NewTask, current_time, shard
from broker.states import TRANSITIONS, State
from broker.wakeup import announce

_EVENTS = ("enqueue", "enqueue_delayed")
_READY = TRANSITIONS["enqueue"][1]
_DELAYED = TRANSITIONS["enqueue_delayed"][1]


def _given(spec: NewTask, now: datetime) -> dict[str, Any]:
    """The columns of a new task that the enqueue decides (sql.NEW_VALUES); the rest are fixed."""
    delayed = spec.delay_ms > 0
    return {
        "state": _DELAYED if delayed else _READY,
        "queue": spec.queue,
        "priority": spec.priority,
        "type": spec.type,
        "payload": spec.payload,
        "max_attempts": spec.max_attempts,
        "available_at": now + timedelta(milliseconds=spec.delay_ms) if delayed else now,
        "idempotency_key": spec.idempotency_key,
        "backoff": spec.backoff,
    }


def _new_row(spec: NewTask, now: datetime) -> Task:
    return Task(**_given(spec, now), attempts=0, created_at=now, updated_at=now)


def enqueue(spec: NewTask) -> tuple[int, bool]:
    """Store a new task: → ready, or → delayed when delay_ms > 0.

    Returns (id, created). With an idempotency key already kept, nothing is created and the first
    task's id comes back with created False; the unique index decides, so racing posts agree.
    Inside a caller's transaction the task, its counts and its wake-up commit with that
    transaction, and the counts never hold a lock another move waits for.
    """
    in_caller_transaction = connection.in_atomic_block
    if connection.vendor == "postgresql":
        return _enqueue_pg(spec, in_caller_transaction)
    for _ in range(3):
        try:
            with transaction.atomic():
                row = _new_row(spec, current_time())
                row.save(force_insert=True)
                moves = [(row.queue, None, row.state)]
                counters.bump(counters.count_moves(_EVENTS, moves), deferred=in_caller_transaction)
                if row.state == State.READY:
                    announce({row.queue: 1})
            observe.moved("new", row.state, task=row.pk, queue=row.queue, attempts=0)
            return row.pk, True
        except IntegrityError:
            existing = _holder_of(spec.idempotency_key)
            if existing is not None:
                return existing, False
            if spec.idempotency_key is None:
                raise
            # The holder of the key was deleted between our insert and our read: try again.
    raise IntegrityError("idempotency key kept changing hands")


def _holder_of(key: str | None) -> int | None:
    if key is None:
        return None
    holder: int | None = (
        Task.objects.filter(idempotency_key=key).values_list("pk", flat=True).first()
    )
    return holder


def _enqueue_pg(spec: NewTask, in_caller_transaction: bool) -> tuple[int, bool]:
    """enqueue() on PostgreSQL: insert, count and NOTIFY in one statement."""
    now = current_time()
    params = {**_given(spec, now), "now": now, "shard": shard()}
    statement = sql.ENQUEUE_IN_CALLER_TRANSACTION if in_caller_transaction else sql.ENQUEUE
    with connection.cursor() as cursor:
        for _ in range(3):
            cursor.execute(statement, params)
            got = cursor.fetchone()
            if got is not None:
                observe.moved("new", params["state"], task=got[0], queue=spec.queue, attempts=0)
                return got[0], True
            # ON CONFLICT DO NOTHING: the key is kept by another task.
            existing = _holder_of(spec.idempotency_key)
            if existing is not None:
                return existing, False
    raise IntegrityError("idempotency key kept changing hands")


def enqueue_many(specs: list[NewTask]) -> list[int]:
    """Store many tasks in one transaction, all or nothing; returns their ids in order.

    An item whose idempotency key is already kept (or repeats an earlier item's) gets that
    task's id and creates nothing, as a single enqueue would.
    """
    keys = {spec.idempotency_key for spec in specs if spec.idempotency_key is not None}
    in_caller_transaction = connection.in_atomic_block
    if not keys and connection.vendor == "postgresql":
        return _enqueue_many_pg(specs, in_caller_transaction)
    for _ in range(3):
        try:
            with transaction.atomic():
                slots, rows = _plan(specs, keys)
                Task.objects.bulk_create(rows)
                moves = [(r.queue, None, r.state) for r in rows]
                counters.bump(counters.count_moves(_EVENTS, moves), deferred=in_caller_transaction)
                announce(Counter(r.queue for r in rows if r.state == State.READY))
        except IntegrityError:
            if not keys:
                raise
            continue  # a racing enqueue took one of the keys: look again
        for state, n in Counter(r.state for r in rows).items():
            observe.moved("new", state, count=n)
        return [slot if isinstance(slot, int) else slot.pk for slot in slots]
    raise IntegrityError("idempotency keys kept changing hands")


def _plan(specs: list[NewTask], keys: set[str]) -> tuple[list[Task | int], list[Task]]:
    """Each item's slot (a new row, or the id of the task keeping its key) and the new rows."""
    kept = (
        dict(Task.objects.filter(idempotency_key__in=keys).values_list("idempotency_key", "pk"))
        if keys
        else {}
    )
    now = current_time()
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
    return slots, rows


def _enqueue_many_pg(specs: list[NewTask], in_caller_transaction: bool) -> list[int]:
    """enqueue_many() on PostgreSQL without keys: insert, count and NOTIFY in one statement."""
    now = current_time()
    rows = [_given(spec, now) for spec in specs]
    columns = [c for c in sql.NEW_VALUES if c != "idempotency_key"]  # none here
    params: dict[str, Any] = {c: [r[c] for r in rows] for c in columns}
    params.update(now=now, shard=shard())
    states = params["state"]
    statement = (
        sql.ENQUEUE_MANY_IN_CALLER_TRANSACTION if in_caller_transaction else sql.ENQUEUE_MANY
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        ids = [row[0] for row in cursor.fetchall()]
    for state, n in Counter(states).items():
        observe.moved("new", state, count=n)
    return ids

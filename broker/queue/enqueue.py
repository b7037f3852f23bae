"""Enqueue: new tasks → ready, or → delayed when they ask for a delay."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction

from broker import observe
from broker.exceptions import InvalidTaskError
from broker.models import Task
from broker.queue import counters, dependencies, keys, sqlenqueue
from broker.queue.base import NewTask, current_time, shard
from broker.states import TRANSITIONS, State
from broker.wakeup import announce

_EVENTS = ("enqueue", "enqueue_delayed", "enqueue_blocked")
_READY = TRANSITIONS["enqueue"][1]
_DELAYED = TRANSITIONS["enqueue_delayed"][1]
_BLOCKED = TRANSITIONS["enqueue_blocked"][1]
# The columns the many-task statement reads: it takes no idempotency key and no key.
_MANY_COLUMNS = tuple(c for c in sqlenqueue.NEW_VALUES if c not in ("idempotency_key", "key"))


def _given(spec: NewTask, now: datetime) -> dict[str, Any]:
    """The columns of a new task that the enqueue decides (sqlenqueue.NEW_VALUES); the rest are
    fixed.

    A blocked one keeps its delay as available_at - created_at: its delay counts from the
    release (dependencies.after_finish)."""
    delayed = spec.delay_ms > 0
    available_at = now + timedelta(milliseconds=spec.delay_ms) if delayed else now
    if spec.not_before is not None:
        delayed = spec.not_before > now
        available_at = spec.not_before if delayed else now
    return {
        "state": _DELAYED if delayed else _READY,
        "queue": spec.queue,
        "priority": spec.priority,
        "type": spec.type,
        "payload": spec.payload,
        "max_attempts": spec.max_attempts,
        "available_at": available_at,
        "idempotency_key": spec.idempotency_key,
        "backoff": spec.backoff,
        "key": spec.key,
        "enqueued_by": spec.enqueued_by,
    }


def _new_row(spec: NewTask, now: datetime, blocking: dependencies.Blocking | None = None) -> Task:
    row = Task(**_given(spec, now), attempts=0, created_at=now, updated_at=now)
    if spec.after:
        row.after_policy = spec.after_policy
    if blocking is not None and blocking.blockers:
        row.state, row.blockers = _BLOCKED, blocking.blockers
    return row


def _blockings(specs: list[NewTask], prefix: str = "") -> list[dependencies.Blocking | None]:
    """Lock every task the specs wait for, then plan each (None: waits for nothing). Raises
    InvalidTaskError naming `<prefix>after.2` (prefix "3." for the fourth item of a batch)."""
    named = sorted({pk for spec in specs for pk in spec.after})
    if not named:
        return [None] * len(specs)
    states = dependencies.lock_parents(named)
    problems: dict[str, list[str]] = {}
    found: list[dependencies.Blocking | None] = []
    for n, spec in enumerate(specs):
        field = f"{prefix.format(n)}after"
        try:
            found.append(
                dependencies.plan(spec.after, spec.after_policy, states, field)
                if spec.after else None
            )  # fmt: skip
        except InvalidTaskError as exc:
            problems.update(exc.fields)
            found.append(None)
    if problems:
        raise InvalidTaskError(problems)
    return found


def enqueue(spec: NewTask) -> tuple[int, bool]:
    """Store a new task: → ready, or → delayed when delay_ms > 0.

    Returns (id, created). With an idempotency key already kept, nothing is created and the first
    task's id comes back with created False; the unique index decides, so racing posts agree.
    Inside a caller's transaction the task, its counts and its wake-up commit with that
    transaction, and the counts never hold a lock another move waits for.
    """
    in_caller_transaction = connection.in_atomic_block
    if connection.vendor == "postgresql" and not spec.after and spec.key is None:
        return _enqueue_pg(spec, in_caller_transaction)
    for _ in range(3):
        try:
            with transaction.atomic():
                (blocking,) = _blockings([spec])
                row = _new_row(spec, current_time(), blocking)
                line = keys.line_up([row])
                row.save(force_insert=True)
                if line is not None:
                    line.close()
                if blocking is not None:
                    dependencies.add_edges(row.pk, spec.after, spec.after_policy, blocking)
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
    statement = (
        sqlenqueue.ENQUEUE_IN_CALLER_TRANSACTION if in_caller_transaction else sqlenqueue.ENQUEUE
    )
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


def enqueue_many(specs: list[NewTask], prefix: str = "{}.") -> list[int]:
    """Store many tasks in one transaction, all or nothing; returns their ids in order.

    An item whose idempotency key is already kept (or repeats an earlier item's) gets that
    task's id and creates nothing, as a single enqueue would. Raises InvalidTaskError naming
    an item's unknown or impossible `after` as `prefix.format(index)` + "after.2".
    """
    kept = {spec.idempotency_key for spec in specs if spec.idempotency_key is not None}
    waits = any(spec.after or spec.key is not None for spec in specs)
    in_caller_transaction = connection.in_atomic_block
    if not kept and not waits and connection.vendor == "postgresql":
        return _enqueue_many_pg(specs, in_caller_transaction)
    for _ in range(3):
        try:
            with transaction.atomic():
                blockings: list[dependencies.Blocking | None] = [None] * len(specs)
                if any(spec.after for spec in specs):
                    blockings = _blockings(specs, prefix)
                slots, rows = _plan(specs, kept, blockings)
                line = keys.line_up(rows)
                Task.objects.bulk_create(rows)
                if line is not None:
                    line.close()
                for spec, slot, blocking in zip(specs, slots, blockings, strict=True):
                    if blocking is not None and isinstance(slot, Task):
                        dependencies.add_edges(slot.pk, spec.after, spec.after_policy, blocking)
                moves = [(r.queue, None, r.state) for r in rows]
                counters.bump(counters.count_moves(_EVENTS, moves), deferred=in_caller_transaction)
                announce(Counter(r.queue for r in rows if r.state == State.READY))
        except IntegrityError:
            if not kept:
                raise
            continue  # a racing enqueue took one of the keys: look again
        for state, n in Counter(r.state for r in rows).items():
            observe.moved("new", state, count=n)
        return [slot if isinstance(slot, int) else slot.pk for slot in slots]
    raise IntegrityError("idempotency keys kept changing hands")


def _plan(
    specs: list[NewTask], idem: set[str], blockings: list[dependencies.Blocking | None]
) -> tuple[list[Task | int], list[Task]]:
    """Each item's slot (a new row, or the id of the task keeping its key) and the new rows."""
    kept = (
        dict(Task.objects.filter(idempotency_key__in=idem).values_list("idempotency_key", "pk"))
        if idem
        else {}
    )
    now = current_time()
    rows: list[Task] = []
    slots: list[Task | int] = []
    by_key: dict[str, Task] = {}
    for spec, blocking in zip(specs, blockings, strict=True):
        key = spec.idempotency_key
        if key in kept:
            slots.append(kept[key])
        elif key is not None and key in by_key:
            slots.append(by_key[key])
        else:
            row = _new_row(spec, now, blocking)
            rows.append(row)
            slots.append(row)
            if key is not None:
                by_key[key] = row
    return slots, rows


def _enqueue_many_pg(specs: list[NewTask], in_caller_transaction: bool) -> list[int]:
    """enqueue_many() on PostgreSQL without keys: insert, count and NOTIFY in one statement."""
    now = current_time()
    rows = [_given(spec, now) for spec in specs]
    params: dict[str, Any] = {c: [r[c] for r in rows] for c in _MANY_COLUMNS}
    params.update(now=now, shard=shard())
    states = params["state"]
    statement = (
        sqlenqueue.ENQUEUE_MANY_IN_CALLER_TRANSACTION
        if in_caller_transaction
        else sqlenqueue.ENQUEUE_MANY
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        ids = [row[0] for row in cursor.fetchall()]
    for state, n in Counter(states).items():
        observe.moved("new", state, count=n)
    return ids

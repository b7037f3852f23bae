"""Enqueue: new tasks → ready, or → delayed when they ask for a delay."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from psycopg.errors import DeadlockDetected

from broker import observe
from broker.exceptions import InvalidTaskError
from broker.models import Task
from broker.queue import (
    batchplan,
    counters,
    dependencies,
    events,
    keys,
    newrows,
    sqlenqueue,
    unique,
)
from broker.queue.base import Enqueued, NewTask, Unique, current_time, shard
from broker.states import TRANSITIONS, State
from broker.wakeup import announce

_EVENTS = ("enqueue", "enqueue_delayed", "enqueue_blocked")
DEADLOCK_DETECTED = DeadlockDetected.sqlstate
_READY = TRANSITIONS["enqueue"][1]
_DELAYED = TRANSITIONS["enqueue_delayed"][1]
_BLOCKED = TRANSITIONS["enqueue_blocked"][1]
# The columns the many-task statement reads: it takes no idempotency key and no key.
_MANY_COLUMNS = tuple(
    c for c in sqlenqueue.NEW_VALUES if c not in ("idempotency_key", "key", "unique_key")
)


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

    Returns (id, created). With an idempotency key already kept, or a unique key held
    (broker.queue.unique), nothing is created and that task's id comes back with created False;
    unique indexes decide, so racing posts agree. Inside a caller's transaction the task, its
    counts and its wake-up commit with that transaction, and the counts never hold a lock
    another move waits for.
    """
    done = enqueue_answer(spec)
    return done.pk, done.created


def enqueue_answer(spec: NewTask) -> Enqueued:
    """enqueue(), saying what it did: created, or the holder's id (deduplicated, replaced)."""
    in_caller_transaction = connection.in_atomic_block
    plain = not spec.after and spec.key is None and spec.wait_for is None
    if connection.vendor == "postgresql" and plain:
        if spec.unique is None:
            pk, created = _enqueue_pg(spec, in_caller_transaction)
            return Enqueued(pk, created)
        return _enqueue_unique_pg(spec, spec.unique, in_caller_transaction)
    for _ in range(3):
        try:
            with transaction.atomic():
                asked = spec.unique
                if asked is not None:
                    kept = _holder_of(spec.idempotency_key)  # looked at first: a retried post
                    if kept is not None:
                        return Enqueued(kept, created=False)
                    now = current_time()
                    found = unique.candidates([(spec.queue, asked.key)], now, asked.period_s)
                    holder = unique.holder_among(found, spec.queue, asked, now)
                    if holder is not None:
                        return _absorbed([(spec, holder)], now, in_caller_transaction)[0]
                row = _insert_one(spec, in_caller_transaction)
            observe.moved("new", row.state, task=row.pk, queue=row.queue, attempts=0)
            return Enqueued(row.pk, created=True)
        except IntegrityError:
            existing = _holder_of(spec.idempotency_key)
            if existing is not None:
                return Enqueued(existing, created=False)
            if spec.idempotency_key is None and spec.unique is None:
                raise
            # The holder of the key was deleted between our insert and our read, or a racing
            # unique enqueue inserted first: look again.
    raise IntegrityError("idempotency or unique key kept changing hands")


def _insert_one(spec: NewTask, in_caller_transaction: bool) -> Task:
    """Insert one task with its edges, wait, key line, counts and wake-up; in a transaction."""
    waits = [spec.wait_for]
    if spec.wait_for is not None:  # its name-and-key lock before any task row's
        events.lock_names([(spec.wait_for.event, spec.wait_for.key)])
    (blocking,) = _blockings([spec])
    now = current_time()
    row = newrows.new_row(spec, now, blocking)
    if spec.wait_for is not None:
        events.plan_waits([row], waits, now)
    line = keys.line_up([row])
    row.save(force_insert=True)
    if line is not None:
        line.close()
    if blocking is not None:
        dependencies.add_edges(row.pk, spec.after, spec.after_policy, blocking)
    if spec.wait_for is not None:
        events.add_waits([row], waits, now)
    moves = [(row.queue, None, row.state)]
    counters.bump(counters.count_moves(_EVENTS, moves), deferred=in_caller_transaction)
    if row.state == State.READY:
        announce({row.queue: 1})
    return row


def _absorbed(
    answered: list[tuple[NewTask, Task]], now: datetime, in_caller_transaction: bool
) -> list[Enqueued]:
    """Answer requests with their holders (absorb), counted and announced. In the enqueue's
    transaction."""
    answers, deltas, woken = _absorb(answered, now)
    counters.bump(deltas, deferred=in_caller_transaction)
    announce(woken)
    return answers


def _absorb(
    answered: list[tuple[NewTask, Task]], now: datetime
) -> tuple[list[Enqueued], counters.Deltas, Counter[str]]:
    """The pending holders locked and absorbing their requests (in request order), saved:
    the answers, the counter changes and the queues to wake, for the caller to apply last (a
    move takes its task rows before the counter rows)."""
    locked = unique.lock_pending([holder.pk for _, holder in answered])
    before: dict[int, str] = {}
    answers: list[Enqueued] = []
    for spec, holder in answered:
        task = locked.get(holder.pk)
        if task is None:
            answers.append(Enqueued(holder.pk, created=False, deduplicated=True))
            continue
        assert spec.unique is not None  # noqa: S101 -- only unique items are answered
        old, replaced = unique.absorb(task, spec, spec.unique, now)
        before.setdefault(task.pk, old)
        answers.append(Enqueued(task.pk, created=False, deduplicated=True, replaced=replaced))
    changed = [locked[pk] for pk in before]
    if changed:
        Task.objects.bulk_update(changed, unique.ABSORBED_FIELDS)
    moves = [(t.queue, before[t.pk], t.state) for t in changed]
    deltas = counters.count_moves(unique.EVENTS, moves)
    for spec, _ in answered:
        deltas[spec.queue]["deduplicated"] += 1
    woken = Counter(
        t.queue for t in changed if t.state == State.READY and before[t.pk] != State.READY
    )
    unique.log_absorbed((t.pk, t.queue, before[t.pk], t.state) for t in changed)
    return answers, deltas, woken


def _enqueue_unique_pg(spec: NewTask, asked: Unique, in_caller_transaction: bool) -> Enqueued:
    """A unique enqueue on PostgreSQL in one statement (broker.queue.unique.statement); again
    when its insert lost a race, to answer with the winner."""
    for _ in range(5):
        now = current_time()
        params = {**newrows.given(spec, now), "now": now, "shard": shard()}
        done = unique.enqueue_pg(spec, asked, params, in_caller_transaction)
        if done is not None:
            return done
    raise IntegrityError("unique key kept changing hands")


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
    params = {**newrows.given(spec, now), "now": now, "shard": shard()}
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
    task's id and creates nothing, as a single enqueue would; so does an item whose unique key
    is held (enqueue_batch). Raises InvalidTaskError naming an item's unknown or impossible
    `after` as `prefix.format(index)` + "after.2".
    """
    return enqueue_batch(specs, prefix)[0]


def enqueue_batch(specs: list[NewTask], prefix: str = "{}.") -> tuple[list[int], list[int]]:
    """enqueue_many(), with the indexes of the items a unique key's holder answered (one in the
    database, or an earlier item of the batch): (ids, deduplicated indexes)."""
    kept = {spec.idempotency_key for spec in specs if spec.idempotency_key is not None}
    uniques = any(spec.unique is not None for spec in specs)
    waits = any(spec.after or spec.key is not None or spec.wait_for is not None for spec in specs)
    in_caller_transaction = connection.in_atomic_block
    if not waits and connection.vendor == "postgresql":
        if uniques:
            return batchplan.enqueue_unique_many_pg(specs, kept, in_caller_transaction)
        if not kept:
            return _enqueue_many_pg(specs, in_caller_transaction), []
    for _ in range(3):
        try:
            with transaction.atomic():
                waited = [(s.wait_for.event, s.wait_for.key) for s in specs if s.wait_for]
                events.lock_names(waited)  # before any task row's lock
                blockings: list[dependencies.Blocking | None] = [None] * len(specs)
                if any(spec.after for spec in specs):
                    blockings = _blockings(specs, prefix)
                plan = batchplan.plan_batch(
                    specs, kept, blockings, batchplan.stored_holders(specs, current_time())
                )
                deltas: counters.Deltas = defaultdict(Counter)
                woken: Counter[str] = Counter()
                if plan.answered:  # task rows first, counter rows last
                    _, deltas, woken = _absorb(plan.answered, plan.now)
                row_waits = [plan.makers[id(r)].wait_for for r in plan.rows] if waited else []
                if waited:
                    events.plan_waits(plan.rows, row_waits, plan.now)
                line = keys.line_up(plan.rows)
                Task.objects.bulk_create(plan.rows)
                if line is not None:
                    line.close()
                if waited:
                    events.add_waits(plan.rows, row_waits, plan.now)
                for spec, slot, blocking in zip(specs, plan.slots, blockings, strict=True):
                    # An item a unique key's holder answered adds no edges to it.
                    made = isinstance(slot, Task) and batchplan.made_by(plan, slot, spec)
                    if blocking is not None and made:
                        assert isinstance(slot, Task)  # noqa: S101 -- for mypy
                        dependencies.add_edges(slot.pk, spec.after, spec.after_policy, blocking)
                moves = [(r.queue, None, r.state) for r in plan.rows]
                for queue_name, change in counters.count_moves(_EVENTS, moves).items():
                    deltas[queue_name].update(change)
                for queue_name, n in plan.inside.items():  # answered by an earlier item
                    deltas[queue_name]["deduplicated"] += n
                counters.bump(deltas, deferred=in_caller_transaction)
                woken.update(r.queue for r in plan.rows if r.state == State.READY)
                announce(woken)
        except IntegrityError:
            if not kept and not uniques:
                raise
            continue  # a racing enqueue took one of the keys: look again
        for state, n in Counter(r.state for r in plan.rows).items():
            observe.moved("new", state, count=n)
        ids = [slot if isinstance(slot, int) else slot.pk for slot in plan.slots]
        return ids, plan.deduplicated
    raise IntegrityError("idempotency or unique keys kept changing hands")


def _enqueue_many_pg(specs: list[NewTask], in_caller_transaction: bool) -> list[int]:
    """enqueue_many() on PostgreSQL without keys: insert, count and NOTIFY in one statement."""
    now = current_time()
    rows = [newrows.given(spec, now) for spec in specs]
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

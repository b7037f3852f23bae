"""Enqueue: new tasks → ready, or → delayed when they ask for a delay."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, OperationalError, connection, transaction
from psycopg.errors import DeadlockDetected

from broker import observe
from broker.exceptions import InvalidTaskError
from broker.models import Task
from broker.queue import counters, dependencies, events, keys, sqlenqueue, sqlunique, unique
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


def _given(spec: NewTask, now: datetime) -> dict[str, Any]:
    """The columns of a new task that the enqueue decides (sqlenqueue.NEW_VALUES); the rest are
    fixed.

    A blocked one keeps its delay as available_at - created_at: its delay counts from the
    release (dependencies.after_finish)."""
    delay_ms = unique.first_delay_ms(spec.unique)
    if delay_ms is None:
        delay_ms = spec.delay_ms
    delayed = delay_ms > 0
    available_at = now + timedelta(milliseconds=delay_ms) if delayed else now
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
        "unique_key": spec.unique.key if spec.unique is not None else None,
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
    row = _new_row(spec, now, blocking)
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
        params = {**_given(spec, now), "now": now, "shard": shard()}
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
            return _enqueue_unique_many_pg(specs, kept, in_caller_transaction)
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
                plan = _plan(specs, kept, blockings, _stored_holders(specs, current_time()))
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
                    made = isinstance(slot, Task) and _made_by(plan, slot, spec)
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


def _made_by(plan: _Plan, row: Task, spec: NewTask) -> bool:
    """Whether `row` is the new task of `spec` (an idempotency key's repeat counts as made by
    it, as before unique keys), not an earlier item's unique holder that answered it."""
    return spec.unique is None or plan.makers.get(id(row)) is spec


class _Plan:
    """A batch's items: each one's slot (a new row, or the id of the task that answers it), the
    new rows, the requests a stored holder answers, the indexes a unique key's holder answered."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.slots: list[Task | int] = []
        self.rows: list[Task] = []
        self.answered: list[tuple[NewTask, Task]] = []
        self.deduplicated: list[int] = []
        self.inside: Counter[str] = Counter()  # per queue: items an earlier item's task answered
        self.makers: dict[int, NewTask] = {}  # id(row) → the item that made it


@dataclass(slots=True, eq=False)
class _Row:
    """A new task of a batch on PostgreSQL's path: the columns its insert reads, and what
    unique.absorb changes (a model instance each cost more than the rest of the item)."""

    state: str
    queue: str
    priority: int
    type: str | None
    payload: str
    max_attempts: int | None
    available_at: datetime
    idempotency_key: str | None
    backoff: bool
    key: str | None
    enqueued_by: str | None
    unique_key: str | None
    created_at: datetime
    updated_at: datetime
    absorbed: int = 0
    pk: int | None = None


@dataclass(slots=True, frozen=True)
class _Held:
    """A stored holder as PostgreSQL's batch path reads it."""

    pk: int
    queue: str
    state: str
    claimed_at: datetime | None
    created_at: datetime


def _plain_row(spec: NewTask, now: datetime, blocking: dependencies.Blocking | None) -> Any:
    return _Row(**_given(spec, now), created_at=now, updated_at=now)


def _plan(
    specs: list[NewTask],
    idem: set[str],
    blockings: list[dependencies.Blocking | None],
    held: dict[int, Task | None],
    new_row: Any = _new_row,
) -> _Plan:
    """Each item's slot: a new row, or the task keeping its idempotency key or holding its
    unique key (`held`: the stored holder of each unique item's key by its `until`; or an
    earlier item's new row, which absorbs it)."""
    kept = (
        dict(Task.objects.filter(idempotency_key__in=idem).values_list("idempotency_key", "pk"))
        if idem
        else {}
    )
    plan = _Plan(current_time())
    now = plan.now
    by_key: dict[str, Task] = {}
    by_unique: dict[tuple[str, str], Task] = {}

    def _holding(pair: tuple[str, str], index: int) -> Task | None:
        """The oldest holder of this item's key by its `until`: a stored task, else an earlier
        item's new task (pending, it holds for any `until`)."""
        return held.get(index) or by_unique.get(pair)

    for index, (spec, blocking) in enumerate(zip(specs, blockings, strict=True)):
        key = spec.idempotency_key
        asked = spec.unique
        pair = (spec.queue, asked.key) if asked is not None else None
        if key in kept:
            plan.slots.append(kept[key])
        elif key is not None and key in by_key:
            plan.slots.append(by_key[key])
        elif asked is not None and pair is not None and (slot := _holding(pair, index)):
            plan.deduplicated.append(index)
            if slot.pk is None:  # an earlier item's new task: it absorbs this one now
                unique.absorb(slot, spec, asked, now)
                plan.slots.append(slot)
                plan.inside[spec.queue] += 1
            else:
                plan.answered.append((spec, slot))
                plan.slots.append(slot.pk)
        else:
            row = new_row(spec, now, blocking)
            plan.rows.append(row)
            plan.slots.append(row)
            plan.makers[id(row)] = spec
            if key is not None:
                by_key[key] = row
            if pair is not None:
                by_unique[pair] = row
    return plan


def _enqueue_unique_many_pg(
    specs: list[NewTask], kept: set[str], in_caller_transaction: bool
) -> tuple[list[int], list[int]]:
    """enqueue_batch() on PostgreSQL without `after` or keys: a probe per unique item for its
    holder, then one insert and one absorbing update (sqlunique), in one transaction; again when
    a racing enqueue took a key between the probe and the insert."""
    blockings: list[dependencies.Blocking | None] = [None] * len(specs)
    for _ in range(5):
        try:
            with transaction.atomic():
                now = current_time()
                held = _stored_holders_pg(specs, now)
                plan = _plan(specs, kept, blockings, held, _plain_row)
                _write_batch_pg(plan, in_caller_transaction)
        except IntegrityError:
            continue  # a racing enqueue took a key between the probe and the insert
        except OperationalError as exc:
            # Two batches inserting the same new keys in opposite orders wait on each other's
            # index entries: PostgreSQL ends one; it looks again, and finds the other's tasks.
            if not _deadlocked(exc):
                raise
            continue
        for state, n in Counter(r.state for r in plan.rows).items():
            observe.moved("new", state, count=n)
        ids = [slot if isinstance(slot, int) else slot.pk for slot in plan.slots]
        return ids, plan.deduplicated
    raise IntegrityError("idempotency or unique keys kept changing hands")


def _stored_holders_pg(specs: list[NewTask], now: datetime) -> dict[int, Any]:
    """_stored_holders in one statement: an index probe per unique item."""
    asks = [(n, spec.queue, spec.unique) for n, spec in enumerate(specs) if spec.unique]
    params = {
        "n": [n for n, _, _ in asks],
        "queue": [q for _, q, _ in asks],
        "key": [u.key for _, _, u in asks],
        "until": [u.until for _, _, u in asks],
        "period_s": [u.period_s for _, _, u in asks],
        "now": now,
    }
    held: dict[int, Any] = {}
    with connection.cursor() as cursor:
        cursor.execute(sqlunique.HOLDERS, params)
        for n, pk, queue_name, state, claimed_at, created_at in cursor.fetchall():
            held[n] = _Held(pk, queue_name, state, claimed_at, created_at)
    return held


def _deadlocked(exc: BaseException) -> bool:
    return getattr(exc.__cause__, "sqlstate", None) == DEADLOCK_DETECTED


def _write_batch_pg(plan: _Plan, in_caller_transaction: bool) -> None:
    """The plan's new rows inserted and its stored holders absorbed, with every count and
    wake-up, in one statement (sqlunique.BATCH); the new ids onto the rows. IntegrityError when
    a unique index refused a row (a race lost: look again)."""
    rows = plan.rows
    params: dict[str, Any] = {"now": plan.now, "shard": shard()}
    if rows:
        params.update(
            state=[r.state for r in rows],
            queue=[r.queue for r in rows],
            priority=[r.priority for r in rows],
            type=[r.type for r in rows],
            payload=[r.payload for r in rows],
            max_attempts=[r.max_attempts for r in rows],
            backoff=[r.backoff for r in rows],
            available_at=[r.available_at for r in rows],
            idem=[r.idempotency_key for r in rows],
            unique_key=[r.unique_key for r in rows],
            absorbed=[r.absorbed for r in rows],
            enqueued_by=[r.enqueued_by for r in rows],
        )
    debounce = _absorb_params(plan, params) if plan.answered else False
    if not rows and not plan.answered:
        return
    statement = sqlunique.BATCH[bool(rows), bool(plan.answered), debounce, in_caller_transaction]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        moved = cursor.fetchall()
    ids = [pk for pk, old, _, _ in moved if old is None]  # ascending: in request order
    if len(ids) != len(rows):
        raise IntegrityError("a key was taken meanwhile")
    for row, pk in zip(rows, ids, strict=True):
        row.pk = pk
    absorbed = [(pk, "", old, new) for pk, old, new, _ in moved if old not in (None, unique.HELD)]
    unique.log_absorbed(absorbed)


def _absorb_params(plan: _Plan, params: dict[str, Any]) -> bool:
    """The requests answered by stored holders, per holder: how many, the last replace's
    fields and the last debounce, as the statement's arrays; whether any debounces."""
    per: dict[int, dict[str, Any]] = {}
    for spec, holder in plan.answered:
        got = per.setdefault(holder.pk, {"k": 0, "replace": False, "spec": spec, "bounce": None})
        got["k"] += 1
        asked = spec.unique
        if asked is not None and asked.on_conflict == "replace":
            got["replace"], got["spec"] = True, spec
        if asked is not None and asked.debounce_ms is not None:
            got["bounce"] = asked
    ids = sorted(per)
    params.update(id=ids, k=[per[pk]["k"] for pk in ids])
    params["replace"] = [per[pk]["replace"] for pk in ids]
    for field in ("payload", "type", "priority", "max_attempts"):
        params[f"r_{field}"] = [getattr(per[pk]["spec"], field) for pk in ids]
    params["debounce_ms"] = [b.debounce_ms if (b := per[pk]["bounce"]) else None for pk in ids]
    params["debounce_max_ms"] = [
        b.debounce_max_ms if (b := per[pk]["bounce"]) else None for pk in ids
    ]
    return any(per[pk]["bounce"] is not None for pk in ids)


def _stored_holders(specs: list[NewTask], now: datetime) -> dict[int, Task | None]:
    """For each unique item, by index, the stored task holding its key by its `until`; read
    in one query."""
    asks = {n: (spec.queue, spec.unique) for n, spec in enumerate(specs) if spec.unique}
    if not asks:
        return {}
    periods = [u.period_s for _, u in asks.values() if u.period_s]
    found = unique.candidates(
        [(q, u.key) for q, u in asks.values()], now, max(periods) if periods else None
    )
    return {n: unique.holder_among(found, q, u, now) for n, (q, u) in asks.items()}


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

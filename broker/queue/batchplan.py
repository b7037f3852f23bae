"""A batch's plan when unique keys are in it: which item makes a task, which one a holder
answers (stored, or an earlier item of the batch), and on PostgreSQL the probe for stored holders
and the one statement that inserts the new tasks and absorbs into the holders (sqlunique)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, OperationalError, connection, transaction
from psycopg.errors import DeadlockDetected

from broker import observe
from broker.models import Task
from broker.queue import dependencies, sqlunique, unique
from broker.queue.base import NewTask, current_time, shard
from broker.queue.newrows import given, new_row

DEADLOCK_DETECTED = DeadlockDetected.sqlstate


def made_by(plan: _Plan, row: Task, spec: NewTask) -> bool:
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
    return _Row(**given(spec, now), created_at=now, updated_at=now)


def plan_batch(
    specs: list[NewTask],
    idem: set[str],
    blockings: list[dependencies.Blocking | None],
    held: dict[int, Task | None],
    make: Any = new_row,
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
            row = make(spec, now, blocking)
            plan.rows.append(row)
            plan.slots.append(row)
            plan.makers[id(row)] = spec
            if key is not None:
                by_key[key] = row
            if pair is not None:
                by_unique[pair] = row
    return plan


def enqueue_unique_many_pg(
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
                plan = plan_batch(specs, kept, blockings, held, _plain_row)
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


def stored_holders(specs: list[NewTask], now: datetime) -> dict[int, Task | None]:
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

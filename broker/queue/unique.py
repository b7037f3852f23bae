"""Unique tasks, debounce and throttle: at most one task per queue and unique key while it matters.

The **holder** of a key, for a request whose `until` is
- "finished": the oldest task of the queue with the key that is blocked, delayed, ready or
  handed out;
- "started": the oldest one that is blocked, delayed or ready (one may wait while one runs);
- "period": the oldest one created less than `period_s` ago, in any state (a throttle).

No holder: the enqueue makes a task as usual. A holder: nothing is made, and the answer names the
holder. A holder that is *pending* (never handed out: `claimed_at` is NULL, and not finished) also
absorbs the request, in the same transaction as the answer, under its row lock: its `absorbed`
count goes up, `on_conflict: "replace"` gives it the request's payload, type, priority and
max_attempts, and `debounce_ms` pushes its time ("debounce" / "debounce_ready" in TRANSITIONS: a
ready or delayed holder waits delayed until debounce_ms after the request, capped at
debounce_max_ms after it was created; a blocked one keeps that as its delay once released). A
task handed out is never changed: the lock re-reads the row, and one claimed meanwhile is no
longer pending.

Races are the database's: the partial unique index task_unique_pending_uniq holds at most one
pending task per queue and key, so two enqueues that both found no holder insert one task; the
other's insert conflicts (ON CONFLICT DO NOTHING, or an IntegrityError) and it looks again, in a
new snapshot that sees the winner.

On PostgreSQL a unique enqueue without `after` or `key` is one statement (`statement`): the
idempotency key's task if any, else find the holder, lock and absorb it if pending, else insert,
with the counters and the NOTIFY. The rest (SQLite, and those) run `candidates`, `holder_among`
and `absorb` in a transaction.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Q

from broker import observe
from broker.models import Task
from broker.queue.base import Enqueued, NewTask, Unique
from broker.queue.sqlenqueue import NEW_COLUMNS, new_value
from broker.queue.sqlparts import counted
from broker.states import TRANSITIONS, State
from broker.wakeup import CHANNEL

PENDING_STATES = (State.BLOCKED, State.DELAYED, State.READY)
# The states in which a task holds its key, by the requester's `until` ("period": any state).
HOLDING = {
    "finished": (State.BLOCKED, State.DELAYED, State.READY, State.HANDED_OUT),
    "started": PENDING_STATES,
}
_DEBOUNCED = TRANSITIONS["debounce"][1]
_DEBOUNCED_READY = TRANSITIONS["debounce_ready"][1]
# A moved row whose old state is this was a holder answered without change (period's done task,
# finished's running one): it counts as deduplicated, and is no gauge.
HELD = "held"
KEPT = "kept"  # the task keeping the request's idempotency key answered
DEDUPLICATED = {"deduplicated": "count(*) FILTER (WHERE o IS NOT NULL)"}
EVENTS = ("enqueue", "enqueue_delayed", "debounce", "debounce_ready")


def holds(task: Task, until: Unique, now: datetime) -> bool:
    """Whether `task` holds its key for a request with this `unique`."""
    if until.until == "period":
        return task.created_at > now - timedelta(seconds=until.period_s or 0)
    return task.state in HOLDING[until.until]


def pending(task: Task) -> bool:
    """Never handed out and not finished: a holder a request may change."""
    return task.claimed_at is None and task.state in PENDING_STATES


def first_delay_ms(unique: Unique | None) -> int | None:
    """The delay of a new task made with debounce_ms (None: no debounce): it starts delayed by
    it, capped at debounce_max_ms."""
    if unique is None or unique.debounce_ms is None:
        return None
    if unique.debounce_max_ms is not None:
        return min(unique.debounce_ms, unique.debounce_max_ms)
    return unique.debounce_ms


def debounced_until(unique: Unique, created_at: datetime, now: datetime) -> datetime:
    """When a debounced holder becomes ready: debounce_ms after now, but never later than
    debounce_max_ms after it was created."""
    at = now + timedelta(milliseconds=unique.debounce_ms or 0)
    if unique.debounce_max_ms is not None:
        at = min(at, created_at + timedelta(milliseconds=unique.debounce_max_ms))
    return at


# -- the ORM path (SQLite; and unique enqueues with an idempotency key, `after` or `key`) --------


def candidates(pairs: Iterable[tuple[str, str]], now: datetime, widest_s: int | None) -> list[Task]:
    """The tasks that may hold any of these (queue, key) pairs for some `until`: live, or
    created within `widest_s` seconds (the longest period asked). Oldest first."""
    pairs = set(pairs)
    live = Q(state__in=HOLDING["finished"])
    if widest_s is not None:
        live |= Q(created_at__gt=now - timedelta(seconds=widest_s))
    found = Task.objects.filter(live, unique_key__in={key for _, key in pairs}).only(
        "pk", "queue", "unique_key", "state", "claimed_at", "created_at", "available_at"
    )
    return sorted((t for t in found if (t.queue, t.unique_key) in pairs), key=lambda t: t.pk)


def holder_among(
    tasks: Sequence[Task], queue_name: str, asked: Unique, now: datetime
) -> Task | None:
    """The holder of the key among `candidates` (the oldest that holds), or None."""
    for task in tasks:
        if task.queue == queue_name and task.unique_key == asked.key and holds(task, asked, now):
            return task
    return None


def lock_pending(pks: Sequence[int]) -> dict[int, Task]:
    """Lock these holders and re-read them: those still pending, by id. A claim that took one
    meanwhile committed first; its row is no longer pending and is left alone."""
    if not pks:
        return {}
    locked = (
        Task.objects.select_for_update()
        .filter(pk__in=sorted(pks), claimed_at__isnull=True, state__in=PENDING_STATES)
        .order_by("pk")
    )
    return {t.pk: t for t in locked}


def absorb(task: Task, spec: NewTask, unique: Unique, now: datetime) -> tuple[str, bool]:
    """Apply one request (`spec`, its `unique`) to a locked pending holder (in memory; the
    caller saves it). Returns (its state before, replaced)."""
    old = task.state
    task.absorbed += 1
    task.updated_at = now
    replaced = unique.on_conflict == "replace"
    if replaced:
        task.payload, task.type = spec.payload, spec.type
        task.priority, task.max_attempts = spec.priority, spec.max_attempts
    if unique.debounce_ms is not None:
        at = debounced_until(unique, task.created_at, now)
        if task.state == State.BLOCKED:
            # Its delay counts from the release: available_at - created_at holds it.
            task.available_at = task.created_at + max(at - now, timedelta(0))
        else:  # ready at once when its time (capped by debounce_max_ms) is not ahead
            task.state, task.available_at = (_DEBOUNCED if at > now else _DEBOUNCED_READY), at
    return old, replaced


ABSORBED_FIELDS = (
    "absorbed", "updated_at", "payload", "type", "priority", "max_attempts", "state",
    "available_at",
)  # fmt: skip


def log_absorbed(moves: Iterable[tuple[int, str, str, str]]) -> None:
    """Log the state changes of absorbed holders ((id, queue, before, after))."""
    for pk, queue_name, old, new in moves:
        if old != new:
            observe.moved(old, new, task=pk, queue=queue_name, attempts=0)


# -- PostgreSQL: one statement ------------------------------------------------------------------

_PENDING_SQL = "t.claimed_at IS NULL AND t.state IN ('blocked', 'delayed', 'ready')"
# The partial unique index's predicate, for PostgreSQL to infer it (Task.Meta).
UNIQUE_CONFLICT = (
    "ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL AND claimed_at IS NULL"
    " AND state IN ('blocked', 'delayed', 'ready') DO NOTHING"
)


def _holding_sql(until: str) -> str:
    if until == "period":
        return "created_at > %(now)s - %(period_s)s * interval '1 second'"
    return f"state IN ({', '.join(repr(str(s.value)) for s in HOLDING[until])})"


def _absorb_sets(replace: bool, debounce: bool, capped: bool) -> str:
    sets = ["absorbed = t.absorbed + 1", "updated_at = %(now)s"]
    if replace:
        sets += [
            "payload = %(payload)s", "type = %(type)s", "priority = %(priority)s",
            "max_attempts = %(max_attempts)s",
        ]  # fmt: skip
    if debounce:
        sets += [
            "state = CASE WHEN t.state = 'blocked' THEN 'blocked'"
            f" WHEN p.at > %(now)s THEN '{_DEBOUNCED}' ELSE '{_DEBOUNCED_READY}' END",
            "available_at = CASE WHEN t.state = 'blocked'"
            " THEN t.created_at + greatest(p.at - %(now)s, interval '0')"
            " ELSE p.at END",
        ]
    return ", ".join(sets)


@functools.cache
def statement(
    until: str, replace: bool, debounce: bool, capped: bool, deferred: bool, idem: bool = False
) -> str:
    """The one-statement unique enqueue; params: the new task's columns (sqlenqueue.NEW_VALUES),
    now, shard, period_s, debounce_ms, debounce_max_ms.

    Rows out: (id, o, n): a new task (o NULL), an absorbed holder (o its state before), a
    holder left as it was (o HELD), or with `idem` the task keeping the request's idempotency
    key (o KEPT: looked at first, a retried post). No row: the insert lost a race; run it again.
    """
    at = "%(now)s + %(debounce_ms)s * interval '1 millisecond'"
    if capped:
        at = f"least({at}, t.created_at + %(debounce_max_ms)s * interval '1 millisecond')"
    # Built from constants; every value goes as a parameter.
    kept = (
        "i AS (SELECT id FROM broker_task WHERE idempotency_key = %(idempotency_key)s), "
        if idem
        else ""
    )
    unkept = " AND NOT EXISTS (SELECT 1 FROM i)" if idem else ""
    answered_kept = f" UNION ALL SELECT id, '{KEPT}', '{KEPT}', 0 FROM i" if idem else ""  # noqa: S608
    # Any unique index: the idempotency key's too, when the request has one.
    conflict = "ON CONFLICT DO NOTHING" if idem else UNIQUE_CONFLICT
    return (
        f"WITH {kept}h AS (SELECT id, queue FROM broker_task"  # noqa: S608
        f" WHERE unique_key = %(unique_key)s AND queue = %(queue)s AND {_holding_sql(until)}"
        f"{unkept} ORDER BY id LIMIT 1)"
        # The holder locked, re-read (a claim that took it meanwhile has committed: then it is
        # not pending, and left alone), with its state before and its debounced time.
        f", p AS (SELECT t.id, t.state AS o, {at} AS at FROM broker_task t JOIN h ON t.id = h.id"
        f" WHERE {_PENDING_SQL} FOR UPDATE OF t)"
        f", a AS (UPDATE broker_task t SET {_absorb_sets(replace, debounce, capped)}"
        " FROM p WHERE t.id = p.id RETURNING t.id, t.queue, p.o, t.state AS n)"
        f", new AS (INSERT INTO broker_task ({', '.join(NEW_COLUMNS)})"
        f" SELECT {', '.join(new_value(c) for c in NEW_COLUMNS)}"
        f" WHERE NOT EXISTS (SELECT 1 FROM h){unkept} {conflict}"
        " RETURNING id, queue, NULL::text AS o, state AS n)"
        ", moved AS (SELECT id, queue, o, n FROM new UNION ALL SELECT id, queue, o, n FROM a"
        f" UNION ALL SELECT id, queue, '{HELD}', '{HELD}' FROM h WHERE NOT EXISTS"
        " (SELECT 1 FROM a))"
        f", counted AS ({counted('moved', EVENTS, deferred=deferred, extra=DEDUPLICATED)})"
        f", notified AS (SELECT pg_notify('{CHANNEL}', queue || ':1') FROM moved"
        " WHERE n = 'ready' AND o IS DISTINCT FROM 'ready')"
        " SELECT id, o, n, (SELECT count(*) FROM notified) FROM moved" + answered_kept
    )


def enqueue_pg(
    spec: NewTask, unique: Unique, params: dict[str, Any], deferred: bool
) -> Enqueued | None:
    """The unique enqueue in one statement; None when its insert lost a race (run it again)."""
    sql = statement(
        unique.until,
        unique.on_conflict == "replace",
        unique.debounce_ms is not None,
        unique.debounce_max_ms is not None,
        deferred,
        spec.idempotency_key is not None,
    )
    params = {
        **params,
        "period_s": unique.period_s,
        "debounce_ms": unique.debounce_ms,
        "debounce_max_ms": unique.debounce_max_ms,
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    pk, old, new, _ = row
    if old == KEPT:
        return Enqueued(pk, created=False)
    if old is None:
        observe.moved("new", new, task=pk, queue=spec.queue, attempts=0)
        return Enqueued(pk, created=True)
    log_absorbed([(pk, spec.queue, old, new)])
    replaced = old != HELD and unique.on_conflict == "replace"
    return Enqueued(pk, created=False, deduplicated=True, replaced=replaced)

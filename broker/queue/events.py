"""Waiting for events: a task blocked on `wait_for`, released by POST /events (or its timeout),
and a held task suspended to wait (POST /jobs/{id}/wait).

A wait is an EventWait row and one of the task's `blockers`: an event counts it down as a
parent's end does (broker.queue.dependencies), so a task with `after` as well is released when
both hold. The event is kept (Event), so a wait made after it still matches it: the newest kept
event of its name and key received at or after the wait's `since`.

The race an event system must not lose (a wait being made while its event is posted): every
transaction that makes a wait or posts an event first takes a transaction lock on the name and
key (PostgreSQL's advisory lock; SQLite has one writer). So either the event commits first and the
wait, reading after the lock, finds it kept; or the wait commits first and the event's release,
reading after the lock, finds the wait.

Lock order: the name-and-key lock first (before any task row), then the tasks in id order, then
the counter rows. A timeout takes no name-and-key lock: it locks its tasks (a cancel's reach
first, as every cancel) and deletes the wait rows; a wait row deleted by another move meanwhile
is not there to delete, so each wait ends exactly once however many sweepers run.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from django.db import connection, transaction
from django.db.models import F

from broker import observe
from broker.models import Event, EventWait, Task
from broker.queue import counters, dependencies, restricted
from broker.queue.base import WaitFor, api_time, aware, current_time, storable
from broker.queue.lease import not_held
from broker.queue.sqlparts import RETIRED
from broker.states import TRANSITIONS, State
from broker.wakeup import announce
from contract.conf import broker_settings

_BLOCKED = State.BLOCKED.value
_READY, _DELAYED = TRANSITIONS["event"][1], TRANSITIONS["event_delayed"][1]
_RELEASES = ("event", "event_delayed")
_CANCELLED = TRANSITIONS["wait_timeout"][1]


@dataclass(frozen=True, slots=True)
class Posted:
    """What POST /events did: the event's id, and how many tasks' waits it ended (released to
    ready or delayed, or still blocked on their `after`)."""

    pk: int
    released: int


# -- the name-and-key lock --------------------------------------------------------------------


def _lock_id(name: str, key: str) -> int:
    """A signed 64-bit number for the name and key (the same in every process)."""
    digest = hashlib.blake2b(f"{name}\x1f{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def lock_names(pairs: Iterable[tuple[str, str]]) -> None:
    """Take the transaction locks of these names and keys, in one order (PostgreSQL; SQLite has
    a single writer). Call first in the transaction, before any task row is locked."""
    if connection.vendor != "postgresql":
        return
    ids = sorted({_lock_id(name, key) for name, key in pairs})
    if ids:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(x) FROM unnest(%s::bigint[]) AS x ORDER BY x", [ids]
            )


# -- kept events ------------------------------------------------------------------------------


def event_text(pk: int, name: str, key: str, data: str, at: datetime) -> str:
    """The event as tasks carry it (JSON text): {"id", "name", "key", "data", "at"}."""
    head = json.dumps({"id": str(pk), "name": name, "key": key}, ensure_ascii=True)[:-1]
    return f'{head}, "data": {data}, "at": "{api_time(at)}"}}'


def _kept_since(now: datetime) -> datetime | None:
    retention = broker_settings.BROKER_EVENT_RETENTION
    return now - retention if retention else None


def _allows(scope: str | None, queue: str) -> bool:
    """Whether an event sent with this scope (its token's produce patterns) may release a task of
    `queue`."""
    return scope is None or any(fnmatchcase(queue, p) for p in json.loads(scope))


def kept_match(wait: WaitFor, queue: str, now: datetime) -> str | None:
    """The newest kept event a new wait of `queue` takes (its JSON text), or None. Call after
    lock_names."""
    events = Event.objects.filter(name=wait.event, key=wait.key)
    oldest = _kept_since(now)
    if wait.since is not None:
        oldest = max(oldest, wait.since) if oldest is not None else wait.since
    if oldest is not None:
        events = events.filter(received_at__gte=oldest)
    rows = events.order_by("-received_at", "-pk").values_list(
        "pk", "name", "key", "data", "received_at", "scope"
    )
    for pk, name, key, data, at, scope in rows[:100]:
        if _allows(scope, queue):
            return event_text(pk, name, key, data, at)
    return None


def wait_row(task_id: int, wait: WaitFor, now: datetime) -> EventWait:
    deadline = None
    if wait.timeout_ms is not None:
        deadline = now + timedelta(milliseconds=wait.timeout_ms)
    return EventWait(
        task_id=task_id,
        name=wait.event,
        key=wait.key,
        since=wait.since,
        began_at=now,
        deadline=deadline,
        on_timeout=wait.on_timeout,
    )


def plan_waits(rows: Sequence[Any], waits: Sequence[WaitFor | None], now: datetime) -> None:
    """At enqueue, before the rows are inserted (in their transaction): each row that waits takes
    a kept event (its `event` set), or starts blocked on it (one more blocker)."""
    lock_names((w.event, w.key) for w in waits if w is not None)
    for row, wait in zip(rows, waits, strict=True):
        if wait is None:
            continue
        found = kept_match(wait, row.queue, now)
        if found is not None:
            row.event = found
        else:
            row.state = _BLOCKED
            row.blockers += 1


def add_waits(rows: Sequence[Any], waits: Sequence[WaitFor | None], now: datetime) -> None:
    """The wait rows of the inserted `rows` still waiting (plan_waits)."""
    made = [
        wait_row(row.pk, wait, now)
        for row, wait in zip(rows, waits, strict=True)
        if wait is not None and row.event is None
    ]
    if made:
        EventWait.objects.bulk_create(made)


# -- release ----------------------------------------------------------------------------------

_WAITERS = (
    "SELECT t.id, t.queue, t.state, t.blockers, t.available_at, t.created_at, t.key_wait"
    " FROM broker_task t JOIN broker_eventwait w ON w.task_id = t.id"
    " WHERE w.name = %s AND w.key = %s ORDER BY t.id"
)


# Ids per statement: a statement takes at most 65535 parameters (PostgreSQL's wire protocol).
_CHUNK = 10_000


def _chunks(ids: list[int]) -> list[list[int]]:
    return [ids[n : n + _CHUNK] for n in range(0, len(ids), _CHUNK)]


def _delete_waits(ids: list[int]) -> set[int]:
    """Delete these tasks' wait rows; the ids whose rows were still there (others ended them)."""
    ended: set[int] = set()
    with connection.cursor() as cursor:
        for chunk in _chunks(ids):
            marks = ", ".join(["%s"] * len(chunk))
            cursor.execute(
                f"DELETE FROM broker_eventwait WHERE task_id IN ({marks}) RETURNING task_id",  # noqa: S608
                chunk,
            )
            ended.update(row[0] for row in cursor.fetchall())
    return ended


def _release(rows: Sequence[tuple[Any, ...]], event: str | None, now: datetime) -> list[Any]:
    """Count down the wait of the locked blocked `rows` (id, queue, state, blockers,
    available_at, created_at, key_wait) and release those with nothing else left: → ready, or
    → delayed for their delay_ms from now. A few statements whatever their number. Returns the
    moves (queue, blocked, new state) of the released; wakes claimers."""
    stay: list[int] = []
    ready: list[int] = []
    delayed: dict[timedelta, list[int]] = defaultdict(list)
    moves: list[Any] = []
    woken: Counter[str] = Counter()
    for pk, queue, state, blockers, available_at, created_at, key_wait in rows:
        if state != _BLOCKED:
            continue
        if blockers > 1:
            stay.append(pk)
            continue
        delay = _aware(available_at) - _aware(created_at)
        if delay > timedelta(0):
            delayed[delay].append(pk)
            moves.append((queue, _BLOCKED, _DELAYED))
        else:
            ready.append(pk)
            moves.append((queue, _BLOCKED, _READY))
            woken[queue] += not key_wait
    tasks = Task.objects
    for chunk in _chunks(stay):
        tasks.filter(pk__in=chunk).update(blockers=F("blockers") - 1, event=event, updated_at=now)
    for chunk in _chunks(ready):
        tasks.filter(pk__in=chunk).update(
            state=_READY, blockers=0, available_at=now, event=event, updated_at=now
        )
    for delay, ids in delayed.items():
        for chunk in _chunks(ids):
            tasks.filter(pk__in=chunk).update(
                state=_DELAYED, blockers=0, available_at=now + delay, event=event, updated_at=now
            )
    announce(+woken)
    return moves


def _aware(value: Any) -> datetime:
    got = aware(value)
    assert got is not None  # noqa: S101 -- a task's times are never NULL
    return got


def post_event(name: str, key: str, data: str, scope: list[str] | None) -> Posted:
    """Receive an event: keep it, and release, in one transaction, every task of the queues
    `scope` allows (None: all) waiting for its name and key. Counts `events` and `released`."""
    with transaction.atomic():
        lock_names([(name, key)])
        now = current_time()
        kept = json.dumps(scope) if scope is not None else None
        event = Event.objects.create(name=name, key=key, data=data, received_at=now, scope=kept)
        with connection.cursor() as cursor:
            locking = " FOR UPDATE OF t" if connection.vendor == "postgresql" else ""
            cursor.execute(_WAITERS + locking, [name, key])
            rows = [r for r in cursor.fetchall() if scope is None or _allows(kept, r[1])]
        ended = _delete_waits([r[0] for r in rows])
        rows = [r for r in rows if r[0] in ended]
        moves = _release(rows, event_text(event.pk, name, key, data, now), now)
        deltas = counters.count_moves(_RELEASES, moves)
        deltas[RETIRED]["events"] += 1  # an event belongs to no queue: counted in the totals
        counters.bump(deltas)
    for new, n in Counter(new for _, _, new in moves).items():
        observe.moved(_BLOCKED, new, count=n)
    # Every blocked task whose wait it ended (one that stays blocked on its `after` too).
    return Posted(event.pk, sum(1 for r in rows if r[2] == _BLOCKED))


def list_events(name: str | None, key: str | None) -> Any:
    """Kept events, newest first, optionally of one name and key."""
    events = Event.objects.all()
    if name is not None:
        events = events.filter(name=name)
    if key is not None:
        events = events.filter(key=key)
    return events.order_by("-pk")


def prune_events(now: datetime, batch: int = 500) -> int:
    """Delete events received before BROKER_EVENT_RETENTION (none when it is 0)."""
    oldest = _kept_since(now)
    if oldest is None:
        return 0
    ids = list(
        Event.objects.filter(received_at__lt=oldest).order_by("received_at")
        .values_list("pk", flat=True)[:batch]
    )  # fmt: skip
    if ids:
        Event.objects.filter(pk__in=ids).delete()
    return len(ids)


# -- suspend ----------------------------------------------------------------------------------


def suspend(task_id: int, *, lease_id: str, wait: WaitFor, checkpoint: Any = None) -> str:
    """handed_out → blocked on `wait` (or → ready at once when a kept event matches it): the
    lease and the attempt given back, `checkpoint` (JSON text; None: the last one kept) kept.
    Returns the new state. Raises TaskNotHeld (404) or LeaseMismatch (409) as ack does."""
    with transaction.atomic():
        lock_names([(wait.event, wait.key)])
        now = current_time()
        row = (
            Task.objects.select_for_update()
            .filter(pk=task_id, state=State.HANDED_OUT, lease_id=storable(lease_id))
            .values_list("queue", "attempts", "created_at")
            .first()
        )
        if row is None:
            raise not_held(task_id)
        queue_name, attempts, created_at = row
        found = kept_match(wait, queue_name, now)
        changes: dict[str, Any] = {
            "lease_id": None,
            "lease_deadline": None,
            "worker": None,
            "updated_at": now,
            "attempts": max(attempts - 1, 0),  # the attempt is given back
            "event": found,
        }
        if checkpoint is not None:
            changes["checkpoint"] = checkpoint
        if found is not None:
            event, new = "suspend_released", TRANSITIONS["suspend_released"][1]
            changes.update(state=new, available_at=now, blockers=0)
        else:
            # available_at = created_at: no delay to wait out once released.
            event, new = "suspend", TRANSITIONS["suspend"][1]
            changes.update(state=new, available_at=created_at, blockers=1)
        Task.objects.filter(pk=task_id).update(**changes)
        if found is None:
            wait_row(task_id, wait, now).save(force_insert=True)
        counters.bump(counters.count_moves((event,), [(queue_name, State.HANDED_OUT, new)]))
        restricted.wake_freed({queue_name: 1})
        if new == _READY:
            announce({queue_name: 1})
    observe.moved(State.HANDED_OUT, new, task=task_id, queue=queue_name, attempts=attempts)
    return str(new)


# -- timeouts ---------------------------------------------------------------------------------


def expire_waits(now: datetime, limit: int = 500) -> int:
    """End the waits whose deadline has passed: "run" releases the task with no event, "cancel"
    cancels it (with the cancel cascade). Exactly once however many sweepers run: each wait row
    is deleted by the one move that ends it. Returns how many waits it ended (those of tasks
    cancelled meanwhile too: they move nothing)."""
    due = list(
        EventWait.objects.filter(deadline__lte=now)
        .order_by("deadline")
        .values_list("task_id", "on_timeout")[:limit]
    )
    if not due:
        return 0
    run = sorted(pk for pk, how in due if how == "run")
    doomed = sorted(pk for pk, how in due if how != "run")
    return (_run_out(run, now) if run else 0) + (_cancel_out(doomed, now) if doomed else 0)


def _locked(ids: list[int]) -> list[tuple[Any, ...]]:
    return list(
        Task.objects.select_for_update()
        .filter(pk__in=ids)
        .order_by("pk")
        .values_list("pk", "queue", "state", "blockers", "available_at", "created_at", "key_wait")
    )


def _run_out(ids: list[int], now: datetime) -> int:
    """Timed-out waits with on_timeout "run": released with `event` null."""
    with transaction.atomic():
        rows = _locked(ids)
        ended = _delete_waits([r[0] for r in rows])
        moves = _release([r for r in rows if r[0] in ended], None, now)
        counters.bump(counters.count_moves(_RELEASES, moves))
    for new, n in Counter(new for _, _, new in moves).items():
        observe.moved(_BLOCKED, new, count=n)
    return len(ended)


def _cancel_out(ids: list[int], now: datetime) -> int:
    """Timed-out waits with on_timeout "cancel": the blocked tasks cancelled, their dependants
    as a cancel's (dependencies: lock order)."""
    with transaction.atomic():
        dependencies.lock_for_cancel(ids)
        dependencies.hold_turns(ids)
        rows = _locked(ids)
        ended = _delete_waits([r[0] for r in rows])
        gone = [(pk, queue) for pk, queue, state, *_ in rows if pk in ended and state == _BLOCKED]
        if not gone:
            return len(ended)
        Task.objects.filter(pk__in=[pk for pk, _ in gone]).update(
            state=_CANCELLED, blockers=0, updated_at=now
        )
        dependencies.after_finish(dict.fromkeys((pk for pk, _ in gone), _CANCELLED), now)
        moves = [(queue, _BLOCKED, _CANCELLED) for _, queue in gone]
        counters.bump(counters.count_moves(("wait_timeout",), moves))
    observe.moved(_BLOCKED, _CANCELLED, count=len(gone))
    return len(ended)

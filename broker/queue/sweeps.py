"""The sweeper's moves: reclaim expired leases (but those an outage holds), promote delayed tasks
that are due, prune."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from django.db import connection, transaction
from django.db.models import Exists, Min, OuterRef, QuerySet

from broker import observe
from broker.models import Dependency, ReclaimHold, Task
from broker.queue import counters, restricted, sql
from broker.queue.base import LEASE_EXPIRED, current_time
from broker.queue.redelivery import HELD_COLUMNS, fail_held
from broker.states import FINISHED_STATES, GAUGE_STATES, TRANSITIONS, State
from broker.wakeup import announce
from contract.conf import broker_settings


class Pending(NamedTuple):
    """Which of the sweeper's moves have something to move."""

    expired: bool
    due: bool
    scheduled: bool
    deltas: bool
    waits: bool  # waits for events past their timeout (broker.queue.events)


def pending(now: datetime) -> Pending:
    """What the sweeper's moves would find at `now` (one read, outside any transaction); a move
    found idle is not run."""
    at = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cursor:
        cursor.execute(sql.PENDING, [at, at, at, at])
        row = cursor.fetchone()
    return Pending(*(bool(flag) for flag in row))


def reclaim_expired(limit: int = 500) -> int:
    """Handed-out tasks whose lease expired → delayed (backoff), ready at once (a task without
    backoff), or dead; error "lease expired". Not those a ReclaimHold holds (hold_reclaims).

    Locks with SKIP LOCKED, so two sweepers never move the same task. Returns how many moved.
    """
    with transaction.atomic():
        now = current_time()
        expired = Task.objects.expired(reclaim_before(now))
        rows = _locked(expired, ("lease_deadline",), HELD_COLUMNS, limit)
        if not rows:
            return 0
        moves = fail_held(rows, now, LEASE_EXPIRED, at_once=False)
        restricted.wake_freed(Counter(queue for queue, _, _ in moves))
    if len(rows) == 1:
        pk, queue, attempts, *_ = rows[0]
        observe.moved(State.HANDED_OUT, moves[0][2], task=pk, queue=queue, attempts=attempts)
    else:
        for state, n in Counter(state for _, _, state in moves).items():
            observe.moved(State.HANDED_OUT, state, count=n)
    return len(rows)


def reclaim_before(now: datetime) -> datetime:
    """Leases that ended before this may be reclaimed now: `now`, or the earliest `since` of the
    holds still running (one indexed read of a table of a few rows)."""
    held = ReclaimHold.objects.filter(until__gt=now).aggregate(since=Min("since"))["since"]
    return now if held is None else min(now, held)


def hold_reclaims(since: datetime, back: datetime) -> datetime:
    """The database was out of a sweeper's reach from `since` (its last sweep) until `back`:
    leases that ended from `since` on are not reclaimed before BROKER_OUTAGE_GRACE_MS after
    `back`, for every sweeper, so that their workers, whose settles met the outage too, get to
    settle them first. Returns the end of the hold."""
    until = back + timedelta(milliseconds=broker_settings.BROKER_OUTAGE_GRACE_MS)
    ReclaimHold.objects.create(since=since, until=until)
    return until


def prune_holds(now: datetime, keep: timedelta = timedelta(hours=1)) -> int:
    """Delete the holds that ended over `keep` ago; returns how many."""
    deleted: int = ReclaimHold.objects.filter(until__lt=now - keep).delete()[0]
    return deleted


def promote_delayed(limit: int = 1000) -> int:
    """Delayed tasks whose time has come → ready, waking claimers. Returns how many moved."""
    target = TRANSITIONS["promote"][1]
    with transaction.atomic():
        now = current_time()
        rows = _locked(Task.objects.due(now), ("available_at",), ("pk", "queue"), limit)
        if not rows:
            return 0
        Task.objects.filter(pk__in=[pk for pk, _ in rows]).update(state=target, updated_at=now)
        moves = [(queue, State.DELAYED.value, target) for _, queue in rows]
        counters.bump(counters.count_moves(("promote",), moves))
        announce(Counter(queue for _, queue in rows))
    if len(rows) == 1:
        observe.moved(State.DELAYED, target, task=rows[0][0], queue=rows[0][1])
    else:
        observe.moved(State.DELAYED, target, count=len(rows))
    return len(rows)


class Pruned(NamedTuple):
    """What one batch of the prune did: how many tasks it deleted, and where the walk goes on
    (the last task it looked at, as (updated_at, id)); None once it reached the end."""

    deleted: int
    walked_to: tuple[datetime, int] | None


# What keeps a finished task past retention: a task not yet done or cancelled that names it in
# `after` (a dead one may be requeued, and its delivery carries this one's result), or a step of
# its workflow not yet done or cancelled (the workflow still runs, or waits in the DLQ). Each is
# one probe of an index: dependency_parent_idx, task_workflow_idx (workflow, state).
_NAMED = Dependency.objects.filter(
    parent_id=OuterRef("pk"), key_order=False, child__state__in=GAUGE_STATES
)
_LIVE_STEP = Task.objects.filter(workflow_id=OuterRef("workflow_id"), state__in=GAUGE_STATES)


def prune_finished(
    older_than: datetime, limit: int = 500, after: tuple[datetime, int] | None = None
) -> Pruned:
    """Look at up to `limit` done or cancelled tasks last moved before `older_than`, oldest
    first (from just after `after`, a walk's Pruned.walked_to), and delete those nothing keeps
    (_NAMED, _LIVE_STEP) with their error history.

    Not a transition: no counter moves (the lifetime totals go on counting what was pruned).
    Dead tasks are never pruned: they wait for a person. SKIP LOCKED and a small `limit` keep
    each batch a short transaction that never waits for, nor long blocks, anyone else. A kept
    task is passed, not looked at again until the walk comes round: tasks kept for weeks cost
    each batch nothing more.
    """
    with transaction.atomic():
        finished = Task.objects.filter(state__in=FINISHED_STATES, updated_at__lt=older_than)
        if after is not None:
            at, pk = after
            finished = finished.filter(updated_at__gte=at).exclude(updated_at=at, pk__lte=pk)
        # Ordered by updated_at: task_finished_idx serves it (ties by id, sorted as they come).
        rows = _locked(finished, ("updated_at", "pk"), ("pk", "updated_at"), limit)
        deleted = 0
        if rows:
            # only("pk"): the cascade to TaskError needs the ids, not the payloads.
            doomed = unkept([pk for pk, _ in rows]).only("pk")
            deleted = doomed.delete()[1].get(Task._meta.label, 0)
    walked_to = (rows[-1][1], rows[-1][0]) if len(rows) == limit else None
    return Pruned(deleted, walked_to)


def unkept(task_ids: list[int]) -> QuerySet:
    """Those of the tasks `task_ids` that nothing keeps past retention (_NAMED, _LIVE_STEP)."""
    return Task.objects.filter(pk__in=task_ids).exclude(Exists(_NAMED) | Exists(_LIVE_STEP))


def _locked(
    tasks: QuerySet, order: tuple[str, ...], columns: Sequence[str], limit: int
) -> list[tuple]:
    """The first `limit` of tasks in order, locked, skipping those another sweeper holds."""
    return list(tasks.order_by(*order).lock_skipping_locked().values_list(*columns)[:limit])

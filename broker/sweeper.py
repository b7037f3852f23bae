"""One sweep: reclaim expired leases, promote delayed tasks that are due (which wakes claimers),
fire the schedules that are due, prune finished tasks older than BROKER_RETENTION, claim
notes older than `waiting` reads and FIFO queues' expired deduplication ids, and record history
(broker/history); and a sweeper's memory of losing the database (OutageWatch)."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import Exists, OuterRef
from django.utils import timezone

from broker import claimers, queue, schedules
from broker.history import recorder as history
from broker.models import Task, Workflow
from broker.queue import events, keys
from broker.queue.base import current_time
from broker.sqs import dedup, extras
from contract.conf import broker_settings
from contract.wording import counted

log = logging.getLogger(__name__)

# Batches of pruning per sweep: a backlog (the first sweep after a long time) is worked off over
# many ticks, so reclaiming leases never waits behind a long delete.
PRUNE_BATCHES_PER_SWEEP = 10
# A sweep that took longer than this to reach the database (a pool reconnecting to a new primary)
# treats the wait as an outage, as if it had failed (OutageWatch).
OUTAGE_GAP_S = 2.0
# How often a running sweeper does the housekeeping (pruning, history): nothing waits on it, and
# it was two thirds of an idle sweep's statements (a sweeper ticks every 250 ms, 50 in tests).
HOUSEKEEPING_EVERY_S = 1.0
# Schedules fired per transaction (one batch enqueue), and for how long a sweep goes on firing
# batches: however many are due at once, the next reclaims and promotions wait at most this
# (and one batch, some 30 ms) past the tick. Those left fire on the next sweeps, once each.
SCHEDULES_PER_BATCH = 100
FIRE_FOR_S = 0.1


@dataclass(frozen=True, slots=True)
class Sweep:
    reclaimed: int
    promoted: int
    pruned: int = 0
    fired: int = 0


def sweep_once(
    batch: int = 500,
    *,
    record_now: bool = False,
    housekeeping: bool = True,
    fire_for_s: float | None = FIRE_FOR_S,
) -> Sweep:
    """Run each move until nothing is left to move, in batches that hold locks briefly, and fire
    the schedules due when it began for up to `fire_for_s` (None: all of them); then, with
    `housekeeping`, prune and record history (at most once a second across sweepers, unless
    `record_now`)."""
    now = current_time()
    todo = queue.pending(now)
    reclaimed = promoted = 0
    while todo.expired and (n := queue.reclaim_expired(limit=batch)) > 0:
        reclaimed += n
        if n < batch:
            break
    while todo.due and (n := queue.promote_delayed(limit=batch * 2)) > 0:
        promoted += n
        if n < batch * 2:
            break
    timed_out = 0
    while todo.waits and (n := events.expire_waits(now, limit=batch)) > 0:
        timed_out += n
        if n < batch:
            break
    fired = _fire(now, fire_for_s) if todo.scheduled else 0
    # Counts made inside callers' transactions (schedules' enqueues too) join the shared rows.
    while (todo.deltas or fired) and queue.fold_deltas(limit=batch * 2) == batch * 2:
        pass
    pruned = _housekeeping(batch, record_now) if housekeeping else 0
    if reclaimed or promoted or pruned or fired or timed_out:
        log.info("sweep: reclaimed %d, promoted %d, pruned %d, fired %s, timed out %d",
                 reclaimed, promoted, pruned, counted(fired, "schedule"), timed_out)  # fmt: skip
    return Sweep(reclaimed, promoted, pruned, fired)


def _fire(due_by: datetime, for_s: float | None) -> int:
    """Fire the schedules due by `due_by` (each at most once: firing moves it past now), a batch
    at a time, until none is left or `for_s` has passed: a flood of due schedules (1500 of
    `every_s: 1`) kept a sweep firing for ever, and no lease was reclaimed meanwhile."""
    started = time.monotonic()
    fired = 0
    while (n := schedules.fire_due(limit=SCHEDULES_PER_BATCH, due_by=due_by)) > 0:
        fired += n
        if n < SCHEDULES_PER_BATCH or (for_s is not None and time.monotonic() - started >= for_s):
            break
    return fired


def _housekeeping(batch: int, record_now: bool) -> int:
    """What only keeps the tables small, and history: finished tasks past retention (how many
    went), claim notes, idle keys (and the keys with nothing to claim put to sleep: a fair
    claim walks only the others), expired deduplication ids, the SQS extras of tasks gone,
    lapsed reclaim holds."""
    pruned = prune(batch)
    claimers.prune()
    keys.prune()
    keys.sleep()
    for _ in range(PRUNE_BATCHES_PER_SWEEP):
        if dedup.prune(batch) < batch:
            break
    extras.prune(batch)
    events.prune_events(current_time(), batch)
    history.record(force=record_now)
    queue.prune_holds(current_time())
    return pruned


# Where this process's walk of old finished tasks goes on (queue.Pruned.walked_to): past the
# tasks something keeps, so that the next sweep starts behind them. None: from the oldest.
_walked_to: tuple[datetime, int] | None = None


def prune(batch: int = 500, max_batches: int = PRUNE_BATCHES_PER_SWEEP) -> int:
    """Delete done and cancelled tasks older than BROKER_RETENTION (none when it is 0) that
    nothing keeps, walking them oldest first, round and round: a sweep stops at the end, or at a
    batch that deleted nothing (all kept: the next sweep goes on after them)."""
    global _walked_to
    retention = broker_settings.BROKER_RETENTION
    if not retention:
        return 0
    older_than = timezone.now() - retention
    pruned = 0
    for _ in range(max_batches):
        batch_done = queue.prune_finished(older_than, limit=batch, after=_walked_to)
        pruned += batch_done.deleted
        _walked_to = batch_done.walked_to
        if _walked_to is None or not batch_done.deleted:
            break
    if pruned:
        prune_workflows(older_than, batch)
    return pruned


def prune_workflows(older_than: datetime, batch: int = 500) -> int:
    """Delete up to `batch` workflows made before `older_than` whose steps were all pruned."""
    emptied = (
        Workflow.objects.filter(created_at__lt=older_than)
        .exclude(Exists(Task.objects.filter(workflow_id=OuterRef("pk"))))
        .order_by("pk")
        .values_list("pk", flat=True)[:batch]
    )
    deleted: int = Workflow.objects.filter(pk__in=list(emptied)).delete()[0]
    return deleted


class OutageWatch:
    """One sweeper's view of the database across its sweeps.

    The database was away (a restart, a failover) when a sweep failed for want of it, or when a
    sweep waited over OUTAGE_GAP_S (or four intervals) to reach it (its connection, from a pool
    that was reconnecting). The outage began at the last sweep that reached it: everything that
    expired before was reclaimed then. The first sweep back records a hold (queue.hold_reclaims)
    before it reclaims anything: the leases that ended since are not reclaimed until
    BROKER_OUTAGE_GRACE_MS after now, by this sweeper or any other, so that the workers whose
    acks met the outage too get to settle them.
    """

    def __init__(self, interval_s: float = 0.25) -> None:
        self.gap_s = max(OUTAGE_GAP_S, 4 * interval_s)
        # Before the first sweep the process's start is the last moment known to be swept.
        self.last_swept = self.last_done = current_time()
        self.lost_since: datetime | None = None
        self.kept_at = -math.inf  # time.monotonic() of the last housekeeping

    def failed(self) -> None:
        """A sweep failed for want of the database."""
        if self.lost_since is None:
            self.lost_since = self.last_swept

    def sweep(self, batch: int = 500) -> Sweep:
        """sweep_once(), after recording the hold an outage calls for; raises as it does."""
        connection.ensure_connection()  # from the pool: the wait is the outage, if any
        reached = current_time()
        since = self.lost_since
        if since is None and (reached - self.last_done).total_seconds() > self.gap_s:
            since = self.last_swept
        if since is not None:
            until = queue.hold_reclaims(since, reached)
            log.warning(
                "database back after %.1f s without it: leases that ended since %s are held"
                " until %s", (reached - since).total_seconds(), since.isoformat(),
                until.isoformat(),
            )  # fmt: skip
            self.lost_since = None
        keep = time.monotonic() - self.kept_at >= HOUSEKEEPING_EVERY_S
        result = sweep_once(batch, housekeeping=keep)
        if keep:
            self.kept_at = time.monotonic()
        self.last_swept, self.last_done = reached, current_time()
        return result

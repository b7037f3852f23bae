"""One sweep: reclaim expired leases, promote delayed tasks that are due (which wakes claimers),
fire the schedules that are due, and prune finished tasks older than BROKER_RETENTION."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from broker import queue, schedules

log = logging.getLogger(__name__)

# Batches of pruning per sweep: a backlog (the first sweep after a long time) is worked off over
# many ticks, so reclaiming leases never waits behind a long delete.
PRUNE_BATCHES_PER_SWEEP = 10


@dataclass(frozen=True, slots=True)
class Sweep:
    reclaimed: int
    promoted: int
    pruned: int = 0
    fired: int = 0


def sweep_once(batch: int = 500) -> Sweep:
    """Run each move until nothing is left to move, in batches that hold locks briefly."""
    reclaimed = promoted = 0
    while (n := queue.reclaim_expired(limit=batch)) > 0:
        reclaimed += n
        if n < batch:
            break
    while (n := queue.promote_delayed(limit=batch * 2)) > 0:
        promoted += n
        if n < batch * 2:
            break
    fired = 0
    while (n := schedules.fire_due(limit=batch)) > 0:
        fired += n
        if n < batch:
            break
    # Counts made inside callers' transactions (schedules' enqueues too) join the shared rows.
    while queue.fold_deltas(limit=batch * 2) == batch * 2:
        pass
    pruned = prune(batch)
    if reclaimed or promoted or pruned or fired:
        log.info("sweep: reclaimed %d, promoted %d, pruned %d, fired %d schedules",
                 reclaimed, promoted, pruned, fired)  # fmt: skip
    return Sweep(reclaimed, promoted, pruned, fired)


def prune(batch: int = 500, max_batches: int = PRUNE_BATCHES_PER_SWEEP) -> int:
    """Delete done and cancelled tasks older than BROKER_RETENTION (none when it is 0)."""
    retention = settings.BROKER_RETENTION
    if not retention:
        return 0
    older_than = timezone.now() - retention
    pruned = 0
    for _ in range(max_batches):
        n = queue.prune_finished(older_than, limit=batch)
        pruned += n
        if n < batch:
            break
    return pruned

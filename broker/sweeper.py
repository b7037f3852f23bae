"""One sweep: reclaim expired leases, promote delayed tasks that are due (which wakes claimers)."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from broker import queue

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sweep:
    reclaimed: int
    promoted: int


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
    if reclaimed or promoted:
        log.info("sweep: reclaimed %d, promoted %d", reclaimed, promoted)
    return Sweep(reclaimed, promoted)

"""What a transition reports besides itself: one log line, and its processing-duration bucket."""

from __future__ import annotations

import logging
from datetime import datetime

from broker.models import DURATION_BUCKETS

log = logging.getLogger("broker.transitions")


def duration_deltas(claimed_at: datetime | None, now: datetime) -> dict[str, int]:
    """Counter-shard deltas recording one claim → ack/nack duration in the histogram.

    Goes into the same `_bump` as the ack/nack's own counter, so the histogram moves in the
    transition's transaction and in the same UPDATE. Nothing when the claim time is unknown.
    """
    if claimed_at is None:
        return {}
    micros = max(int((now - claimed_at).total_seconds() * 1_000_000), 0)
    seconds = micros / 1_000_000
    column = next(name for bound, name in DURATION_BUCKETS if seconds <= bound)
    return {column: 1, "dur_sum_us": micros}


def moved(
    source: str,
    target: str,
    *,
    task: int | None = None,
    queue: str | None = None,
    attempts: int | None = None,
    count: int = 1,
) -> None:
    """Log one state change (or one batch of them) at INFO as a single key=value line.

    `count` > 1 is a batch move: one line for the lot. Costs one level check when INFO is off.
    """
    if not count or not log.isEnabledFor(logging.INFO):
        return
    parts = ["state_change"]
    if task is not None:
        parts.append(f"task={task}")
    if count != 1 or task is None:
        parts.append(f"count={count}")
    if queue is not None:
        parts.append(f"queue={queue}")
    parts.append(f"from={source} to={target}")
    if attempts is not None:
        parts.append(f"attempts={attempts}")
    log.info(
        " ".join(parts),
        extra={
            "task_id": task,
            "queue": queue,
            "from_state": source,
            "to_state": target,
            "attempts": attempts,
            "count": count,
        },
    )

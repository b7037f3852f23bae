"""A finished task's outcome: its result checked against what the broker takes, settled, logged."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from workers.wire import BODY_REFUSED, SETTLED, Settle

log = logging.getLogger("workers.runner")

# Room for what surrounds a result in an ack body (ids, keys, a claim's fields).
ENVELOPE_BYTES = 1024


class Outcome(NamedTuple):
    """A finished task waiting for its ack (error None) or nack."""

    task_id: str
    lease_id: str
    result: Any
    error: str | None
    started: float


def checked(result: Any, max_body_bytes: int) -> tuple[Any, str | None]:
    """(result as the broker will store it, None), or (None, why no ack can carry it).

    Whatever a handler returns must end in an ack or a nack: a result that is not JSON (NaN,
    Infinity, a set, a cycle) or too big for the broker's body limit becomes a nack saying so.
    """
    if result is None:
        return None, None
    try:
        text = json.dumps(result, allow_nan=False)  # ASCII: one character, one byte
    except Exception as exc:  # TypeError, ValueError, RecursionError, or a custom type's own
        return None, f"handler result is not JSON: {exc}"
    limit = max_body_bytes - ENVELOPE_BYTES
    if len(text) > limit:
        return None, (
            f"handler result is {len(text)} bytes of JSON, over the {limit} an ack can carry "
            f"(the broker's body limit is {max_body_bytes} bytes)"
        )
    # The JSON copy is what the broker will keep, and it encodes again whatever happens to
    # the handler's own object meanwhile.
    return json.loads(text), None


def refused_result(status: int, message: str = "") -> str:
    """The nack text for a result the broker refused to take in an ack."""
    why = "over its body limit" if status == 413 else (message or "refused")
    return f"the broker refused the handler result ({status}: {why})"


def split(outcomes: Sequence[Outcome]) -> tuple[list[Outcome], list[Settle], list[Settle]]:
    """The outcomes reordered acks first (as statuses come back), and the items to send."""
    acks = [o for o in outcomes if o.error is None]
    nacks = [o for o in outcomes if o.error is not None]
    return (
        acks + nacks,
        [(o.task_id, o.lease_id, o.result) for o in acks],
        [(o.task_id, o.lease_id, o.error or "") for o in nacks],
    )


def report(ordered: Sequence[Outcome], statuses: Sequence[int]) -> list[Outcome]:
    """Log each settled outcome; return the acks refused for their result, turned into nacks."""
    renack = []
    now = time.monotonic()
    for outcome, status in zip(ordered, statuses, strict=True):
        verb = "ack" if outcome.error is None else "nack"
        if verb == "ack" and status in BODY_REFUSED:
            renack.append(outcome._replace(result=None, error=refused_result(status)))
            continue
        log_outcome(outcome, f"{verb}ed" if status == SETTLED else f"{verb} refused", now)
    return renack


def log_outcome(outcome: Outcome, said: str, now: float) -> None:
    """One INFO line per task: "task ID acked in 0.012 s", with the error of a nack."""
    log.info(
        "task %s %s in %.3f s%s",
        outcome.task_id,
        said,
        now - outcome.started,
        f": {outcome.error}" if outcome.error else "",
    )

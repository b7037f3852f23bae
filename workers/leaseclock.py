"""When a lease the broker granted ends, on this worker's own clock (time.monotonic()).

A claim that long-polls is answered when a task turns up, up to wait_ms after the request went
out, and its lease starts then: the deadline the broker answered is the truth, not "request sent +
lease_ms". The deadline is the broker's wall clock, which may disagree with ours, so it is read
relative to our wall clock and then held within what the exchange proves: the broker started the
lease after the request went out and before the answer came back.
"""

from __future__ import annotations

import time
from datetime import datetime

from contract.limits import MAX_LEASE_MS


def lease_end(deadline: object, lease_ms: int, sent_at: float, received_at: float) -> float:
    """The monotonic time at which a lease of lease_ms (capped as the broker caps it), granted
    during [sent_at, received_at] and answered with `deadline` (RFC 3339), ends; the latest it
    can be when the deadline is unreadable."""
    granted_s = min(lease_ms, MAX_LEASE_MS) / 1000
    earliest, latest = sent_at + granted_s, received_at + granted_s
    try:
        ends = datetime.fromisoformat(str(deadline)).timestamp()
    except (TypeError, ValueError):
        return latest
    told = received_at + (ends - time.time())
    return min(max(told, earliest), latest)

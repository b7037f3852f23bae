"""The dashboard's charts: the history ranges it offers, the range and queue its URL asks for (so
a reload keeps them), and the points a page starts from (so a reload shows the past at once)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from broker.history import reading
from broker.queue.base import current_time
from contract.limits import QUEUE_RE

# name: the span shown, its points' step, how often the page refetches them, how a caption says it.
RANGES: dict[str, dict[str, Any]] = {
    "1h": {"span": 3600, "step": 60, "every": 5000, "words": "the last hour"},
    "24h": {"span": 86400, "step": 60, "every": 15000, "words": "the last 24 hours"},
    "7d": {"span": 7 * 86400, "step": 3600, "every": 60000, "words": "the last 7 days"},
}
DEFAULT_RANGE = "1h"
# The live rates chart spans up to this long: a page starts it from the minutes of history.
RATES_WINDOW_S = 300


@dataclass(frozen=True)
class Asked:
    """What the page's URL asks the history charts for (`?range=24h&queue=mail`)."""

    range: str = DEFAULT_RANGE
    queue: str = ""  # all queues

    @classmethod
    def of(cls, params: Any) -> Asked:
        """From a query string; an unknown range or a name no queue can have is ignored (the
        page never answers a query string with an error)."""
        chosen = params.get("range")
        queue = params.get("queue") or ""
        return cls(
            range=chosen if chosen in RANGES else DEFAULT_RANGE,
            queue=queue if QUEUE_RE.fullmatch(queue) else "",
        )


def history(asked: Asked) -> dict[str, Any]:
    """The points of the asked range, as GET /stats/history answers them."""
    shown = RANGES[asked.range]
    now = current_time()
    points = reading.points(
        reading.Range(
            since=now - timedelta(seconds=shown["span"]),
            until=now,
            step=shown["step"],
            queue=asked.queue or None,
        )
    )
    return {"step": shown["step"], "points": points}


def recent() -> list[dict[str, Any]]:
    """The minute points of every queue over the rates chart's window: what a new page draws
    before its first two snapshots give it a rate."""
    now = current_time()
    since = now - timedelta(seconds=RATES_WINDOW_S)
    return reading.points(reading.Range(since=since, until=now, step=60))

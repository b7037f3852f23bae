"""Reading history: the points of a range of one series (a queue's, or all queues'), with the
current bucket's moves that no recording has counted yet (so every answer adds up to the totals
of its instant). A read fetches the points of its range and three rows, however many queues."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection

from broker.history import sql
from broker.history.recorder import GAUGE_AT, bucket, db_time, fold
from broker.models import DURATION_BUCKETS, HISTORY_COLUMNS, HISTORY_COUNTS, HISTORY_GAUGES
from broker.queue.base import api_time, aware, current_time

_COUNT_AT = [(c, HISTORY_COLUMNS.index(c)) for c in HISTORY_COUNTS]
_GAUGES_SHOWN = [(c, HISTORY_COLUMNS.index(c)) for c in HISTORY_GAUGES]
_HISTOGRAM_AT = [HISTORY_COLUMNS.index(column) for _, column in DURATION_BUCKETS]
_STATEMENTS = {False: sql.read(queue=False), True: sql.read(queue=True)}
POINTS, MARKS, LIVE, CLOCK = range(4)


@dataclass(frozen=True, slots=True)
class Range:
    """What a history read asks for: [since, until], `step` seconds a point, one queue or all."""

    since: datetime
    until: datetime
    step: int
    queue: str | None = None


def points(asked: Range) -> list[dict[str, Any]]:
    """The points of the range, oldest first, one per bucket in which anything was recorded
    (the current bucket always, when the range holds it)."""
    first = bucket(asked.since, asked.step)
    # Whole buckets at both ends: the hour that holds `until` counts all of its minutes, as
    # it will once compacted into an hour point (a read must not change its answer then).
    last = bucket(asked.until, asked.step) + timedelta(seconds=asked.step, microseconds=-1)
    params: dict[str, Any] = {
        "since": db_time(first),
        "until": db_time(last),
        "step": asked.step,
        "queue": sql.ALL_QUEUES if asked.queue is None else asked.queue,
    }
    with connection.cursor() as cursor:
        cursor.execute(_STATEMENTS[asked.queue is not None], params)
        rows = cursor.fetchall()
    width = len(HISTORY_COLUMNS)
    mark = live = [0] * width
    recorded_at = None
    found = []
    for src, _, at, _, *values in rows:
        if src == CLOCK:
            recorded_at = aware(at)
        elif src == POINTS:
            found.append((aware(at) or first, values))
        elif src == MARKS:
            mark = [int(v or 0) for v in values]
        else:
            live = [int(v or 0) for v in values]
    buckets: dict[datetime, list[int]] = {}
    # Oldest first: minutes fold into their hour with the last gauge sample winning.
    for at, values in sorted(found, key=lambda row: row[0]):
        fold(buckets.setdefault(bucket(at, asked.step), [0] * width), values)
    now = current_time()
    current = bucket(max(now, recorded_at) if recorded_at else now, asked.step)
    if first <= current <= asked.until:
        _add_unrecorded(buckets.setdefault(current, [0] * width), live, mark)
    return [_shown(at, buckets[at]) for at in sorted(buckets)]


def _add_unrecorded(total: list[int], live: list[int], mark: list[int]) -> None:
    """The current bucket: plus what moved since the series' mark, with the gauges now."""
    for i, value in enumerate(live):
        total[i] = value if i in GAUGE_AT else total[i] + value - mark[i]


def _shown(at: datetime, values: list[int]) -> dict[str, Any]:
    point: dict[str, Any] = {"at": api_time(at)}
    point.update((name, values[i]) for name, i in _COUNT_AT)
    point.update((name, values[i]) for name, i in _GAUGES_SHOWN)
    counts = [values[i] for i in _HISTOGRAM_AT]
    point["processing_p50_ms"] = quantile_ms(counts, 0.5)
    point["processing_p95_ms"] = quantile_ms(counts, 0.95)
    return point


def quantile_ms(counts: list[int], q: float) -> float | None:
    """The q-quantile of a duration histogram (counts per DURATION_BUCKETS bucket), in ms,
    interpolated linearly inside its bucket as Prometheus' histogram_quantile does; past the
    last finite bound, that bound. None for an empty histogram."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    below, lower = 0, 0.0
    for (upper, _), n in zip(DURATION_BUCKETS, counts, strict=True):
        if n > 0 and below + n >= rank:
            if upper == float("inf"):
                return round(lower * 1000, 3)
            return round((lower + (upper - lower) * (rank - below) / n) * 1000, 3)
        below += n
        lower = upper
    return round(lower * 1000, 3)

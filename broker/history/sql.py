"""History's statements, built once at import: the same text on PostgreSQL and SQLite."""

from __future__ import annotations

from broker.models import (
    HISTORY_COLUMNS,
    HISTORY_GAUGES,
    HistoryClock,
    HistoryMark,
    HistoryPoint,
)
from broker.queue.sqlparts import COUNTER_TABLE, DELTA_TABLE

POINTS = HistoryPoint._meta.db_table
MARKS = HistoryMark._meta.db_table
CLOCK = HistoryClock._meta.db_table
_ALL = ", ".join(HISTORY_COLUMNS)
_GAUGES = frozenset(HISTORY_GAUGES)


# Every queue's counter sums now, one statement (one snapshot), as sqlparts.STATS reads them.
LIVE = (
    f"SELECT queue, {', '.join(f'sum({c}) AS {c}' for c in HISTORY_COLUMNS)} FROM ("
    f"SELECT queue, {_ALL} FROM {COUNTER_TABLE}"
    f" UNION ALL SELECT queue, {_ALL} FROM {DELTA_TABLE}"
    ") AS u GROUP BY queue"
)

READ_MARKS = f"SELECT queue, {_ALL} FROM {MARKS}"


def _upsert(table: str, keys: str, rows: int, *, add_counts: bool) -> str:
    """Write `rows` rows (*keys, *HISTORY_COLUMNS) of `table`; a row already there gets the new
    values, or with `add_counts` its counts added to and its gauges replaced."""
    marks = ", ".join(["%s"] * (len(HISTORY_COLUMNS) + keys.count(",") + 1))
    updates = ", ".join(
        f"{c} = t.{c} + excluded.{c}" if add_counts and c not in _GAUGES else f"{c} = excluded.{c}"
        for c in HISTORY_COLUMNS
    )
    return (
        f"INSERT INTO {table} AS t ({keys}, {_ALL}) VALUES "
        + ", ".join([f"({marks})"] * rows)
        + f" ON CONFLICT ({keys}) DO UPDATE SET {updates}"
    )


def add_to_points(rows: int) -> str:
    """Add counts to `rows` points (step, queue, at, *HISTORY_COLUMNS) and set their gauges."""
    return _upsert(POINTS, "step, queue, at", rows, add_counts=True)


def set_points(rows: int) -> str:
    """Write `rows` points whole (a compacted hour: recomputing it gives the same row)."""
    return _upsert(POINTS, "step, queue, at", rows, add_counts=False)


def set_marks(rows: int) -> str:
    """Set `rows` queues' marks (queue, *HISTORY_COLUMNS)."""
    return _upsert(MARKS, "queue", rows, add_counts=False)


# The minutes of the hours to compact, oldest first (the last of each queue's hour has its
# last gauge sample).
MINUTES_TO_COMPACT = (
    f"SELECT queue, at, {_ALL} FROM {POINTS} WHERE step = 60 AND at >= %s AND at < %s"
    " ORDER BY queue, at"
)
# The oldest points past keeping, a batch at a time (by id: both databases delete so).
PRUNE = (
    f"DELETE FROM {POINTS} WHERE id IN (SELECT id FROM {POINTS}"
    " WHERE step = %s AND at < %s ORDER BY at LIMIT %s)"
)


def read(queue: bool) -> str:
    """One statement, so one snapshot: the points of a range (`src` 0; a step-3600 read takes
    the compacted hours and the minutes of the hours not compacted yet), the marks (1), the
    counter sums now (2) and the time of the last recording (3). Params: step, since (a bucket
    start), until, and queue when `queue`."""
    one = " AND queue = %(queue)s" if queue else ""
    compacted = f"(SELECT compacted_until FROM {CLOCK} ORDER BY id LIMIT 1)"
    points = (
        f"SELECT 0, queue, at, step, {_ALL} FROM {POINTS} WHERE at >= %(since)s"
        f" AND at <= %(until)s{one} AND ("
        "(step = 60 AND (%(step)s = 60"
        f" OR {compacted} IS NULL OR at >= {compacted}))"
        f" OR (step = 3600 AND %(step)s = 3600 AND at < {compacted}))"
    )
    where = " WHERE queue = %(queue)s" if queue else ""
    nothing = ", ".join(["NULL"] * len(HISTORY_COLUMNS))
    return (
        f"{points}"
        f" UNION ALL SELECT 1, queue, NULL, NULL, {_ALL} FROM {MARKS}{where}"
        f" UNION ALL SELECT 2, queue, NULL, NULL, {_ALL} FROM ({LIVE}) AS l{where}"
        f" UNION ALL SELECT 3, NULL, recorded_at, NULL, {nothing} FROM {CLOCK}"
    )

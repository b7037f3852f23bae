"""History's statements, built once at import: the same text on PostgreSQL and SQLite."""

from __future__ import annotations

from broker.models import (
    HISTORY_COLUMNS,
    HISTORY_COUNTS,
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
# The series of all queues: its points are recorded beside each queue's, so a read of all queues
# reads one series, however many queues there are. No queue has this name (QUEUE_RE).
ALL_QUEUES = "*"
_SUMS = ", ".join(f"sum({c}) AS {c}" for c in HISTORY_COLUMNS)


def _rows(where: str = "", columns: str = _ALL) -> str:
    """The counter rows and deltas (as sqlparts' stats read them), `where` applied to each."""
    return (
        f"SELECT queue, {columns} FROM {COUNTER_TABLE}{where}"
        f" UNION ALL SELECT queue, {columns} FROM {DELTA_TABLE}{where}"
    )


# What tells a queue that moved: its counts and gauges (the histogram moves only with acks and
# nacks, which move `acked` or `nacked`).
_TELLING = (*HISTORY_COUNTS, *HISTORY_GAUGES)
_TOLD = (
    f"SELECT queue, {', '.join(f'sum({c}) AS {c}' for c in _TELLING)}"
    f" FROM ({_rows(columns=', '.join(_TELLING))}) AS u GROUP BY queue"
)
# What a recording looks at, beside each series' mark: all queues, the queues that moved since
# their mark, and those holding no task that last moved before %(idle)s (but RETIRED, %(retired)s),
# whose rows it then retires. One statement: the database tells which queues moved from a few
# columns, then sums theirs whole; a queue that did not move is not sent, so what the recorder
# handles grows with the queues that move, not with those that sit.
_MOVED = (
    f"SELECT t.queue FROM ({_TOLD}) AS t LEFT JOIN {MARKS} AS m ON m.queue = t.queue"
    f" WHERE m.queue IS NULL OR {' OR '.join(f't.{c} <> m.{c}' for c in _TELLING)}"
    f" OR (t.queue <> %(retired)s AND {' AND '.join(f't.{c} = 0' for c in HISTORY_GAUGES)}"
    " AND (m.moved_at IS NULL OR m.moved_at < %(idle)s))"
)
RECORDING = (
    f"SELECT l.queue, {', '.join(f'l.{c}' for c in HISTORY_COLUMNS)},"
    f" {', '.join(f'm.{c}' for c in HISTORY_COLUMNS)} FROM ("
    f"SELECT queue, {_SUMS} FROM ({_rows()}) AS u WHERE queue IN ({_MOVED}) GROUP BY queue"
    f" UNION ALL SELECT '{ALL_QUEUES}', {_SUMS} FROM ({_rows()}) AS u"
    f") AS l LEFT JOIN {MARKS} AS m ON m.queue = l.queue"
)


def _upsert(table: str, keys: str, rows: int, *, add_counts: bool, also: str = "") -> str:
    """Write `rows` rows (*keys, *HISTORY_COLUMNS[, also]) of `table`; a row already there gets
    the new values, or with `add_counts` its counts added to and its gauges replaced."""
    columns = (*HISTORY_COLUMNS, also) if also else HISTORY_COLUMNS
    marks = ", ".join(["%s"] * (len(columns) + keys.count(",") + 1))
    updates = ", ".join(
        f"{c} = t.{c} + excluded.{c}" if add_counts and c not in _GAUGES else f"{c} = excluded.{c}"
        for c in columns
    )
    return (
        f"INSERT INTO {table} AS t ({keys}, {', '.join(columns)}) VALUES "
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
    """Set `rows` queues' marks (queue, *HISTORY_COLUMNS, moved_at)."""
    return _upsert(MARKS, "queue", rows, add_counts=False, also="moved_at")


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
    """One statement, so one snapshot: the points of a range of one series (`src` 0; a step-3600
    read takes the compacted hours and the minutes of the hours not compacted yet), its mark (1),
    its counter sums now (2) and the time of the last recording (3). Params: step, since (a
    bucket start), until, and queue (ALL_QUEUES unless `queue`)."""
    compacted = f"(SELECT compacted_until FROM {CLOCK} ORDER BY id LIMIT 1)"
    points = (
        f"SELECT 0, queue, at, step, {_ALL} FROM {POINTS} WHERE queue = %(queue)s"
        " AND at >= %(since)s AND at <= %(until)s AND ("
        "(step = 60 AND (%(step)s = 60"
        f" OR {compacted} IS NULL OR at >= {compacted}))"
        f" OR (step = 3600 AND %(step)s = 3600 AND at < {compacted}))"
    )
    live = (
        f"SELECT queue, {_SUMS} FROM ({_rows(' WHERE queue = %(queue)s')}) AS u GROUP BY queue"
        if queue
        else f"SELECT '{ALL_QUEUES}' AS queue, {_SUMS} FROM ({_rows()}) AS u"
    )
    nothing = ", ".join(["NULL"] * len(HISTORY_COLUMNS))
    return (
        f"{points}"
        f" UNION ALL SELECT 1, queue, NULL, NULL, {_ALL} FROM {MARKS} WHERE queue = %(queue)s"
        f" UNION ALL SELECT 2, queue, NULL, NULL, {_ALL} FROM ({live}) AS l"
        f" UNION ALL SELECT 3, NULL, recorded_at, NULL, {nothing} FROM {CLOCK}"
    )

"""Recording history, from the sweeper: the counter rows' change since the last recording goes
into the current minute (with a sample of the gauges), for each queue that moved and for all
queues together (sql.ALL_QUEUES); finished hours are compacted from their minutes; points past
keeping are pruned; queues left with no task have their counter rows retired (counters.retire).
Each happens once, however many sweepers run: all of it is one transaction holding the lock of
the one HistoryClock row.

Nothing here runs on the hot path: the moves already keep the counter rows, and a recording
reads them (one statement, whose answer is the queues that moved) at most once a second. Once
retired, a queue costs a recording nothing: an idle sweeper's work does not grow with the
queues clients ever named.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction

from broker.history import sql
from broker.models import HISTORY_COLUMNS, HISTORY_GAUGES, HistoryClock, HistoryMark
from broker.queue import counters, names
from broker.queue.base import aware, current_time
from contract.conf import broker_settings

MINUTE, HOUR = 60, 3600
# At most one recording a second, whichever sweeper makes it: the gauges' sampling rate, and how
# far a count may land from its minute (a move just before a minute's end may count in the next).
RECORD_EVERY = timedelta(seconds=1)
PRUNE_BATCH = 5000
# A queue that holds no task and did not move for this long has its counter rows retired
# (counters.retire): a queue emptied and filled all the time keeps them, and its moves never
# wait for a retirement.
RETIRE_AFTER = timedelta(seconds=60)
_ROWS_PER_STATEMENT = 200  # ~6,600 parameters: under SQLite's limit
GAUGE_AT = frozenset(i for i, c in enumerate(HISTORY_COLUMNS) if c in HISTORY_GAUGES)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CLOCK_PK = 1

Values = tuple[int, ...]  # HISTORY_COLUMNS, in order


def bucket(at: datetime, step: int) -> datetime:
    """The start of the `step`-second bucket holding `at` (UTC; buckets start at the epoch)."""
    seconds = int((at - EPOCH).total_seconds()) // step * step
    return EPOCH + timedelta(seconds=seconds)


@dataclass(frozen=True, slots=True)
class Recorded:
    """What one recording wrote: points of the minute, hours compacted, points pruned, queues
    retired."""

    at: datetime
    points: int
    compacted: int = 0
    pruned: int = 0
    retired: int = 0


def record(*, force: bool = False) -> Recorded | None:
    """Record the change since the last recording into the current minute; compact and prune.

    None when another sweeper holds the clock, or recorded less than a second ago (`force`:
    record all the same, for tests and `runsweeper --once`).
    """
    now = current_time()
    if not force and _recent(now):
        return None  # decided by a plain read: most ticks take no lock (SQLite's is the database's)
    with transaction.atomic():
        clock = _lock_clock()
        if clock is None:
            return None
        last, compacted_until = clock
        if last is not None and now - last < RECORD_EVERY and not force:
            return None
        # Never back in time, whatever a host's clock says: a compacted hour stays whole.
        at = max(now, last) if last is not None else now
        new_minute = last is None or bucket(last, MINUTE) != bucket(at, MINUTE)
        points, idle = _record_minute(at, new_minute)
        hour = bucket(at, HOUR)
        compacted = 0
        if compacted_until is None or compacted_until < hour:
            compacted = _compact(compacted_until or EPOCH, hour)
            compacted_until = hour
        pruned = _prune(at, compacted_until) if new_minute else 0
        HistoryClock.objects.filter(pk=_CLOCK_PK).update(
            recorded_at=at, compacted_until=compacted_until
        )
        # Last: the rows it locks (a move of those queues would wait) are held only till commit.
        retired = _retire(idle, at)
    return Recorded(at, points, compacted, pruned, retired)


def _recent(now: datetime) -> bool:
    """Whether some sweeper recorded less than RECORD_EVERY ago (read without a lock)."""
    last = HistoryClock.objects.filter(pk=_CLOCK_PK).values_list("recorded_at", flat=True).first()
    return last is not None and now - last < RECORD_EVERY


def _lock_clock() -> tuple[datetime | None, datetime | None] | None:
    """(recorded_at, compacted_until) of the clock row, locked; None when another holds it.

    SKIP LOCKED: a second sweeper does not wait behind the first, it skips this tick. (SQLite's
    IMMEDIATE transaction already holds the database's write lock.)
    """
    for _ in range(2):
        found = (
            HistoryClock.objects.filter(pk=_CLOCK_PK)
            .select_for_update(skip_locked=True)
            .values_list("recorded_at", "compacted_until")
            .first()
        )
        if found is not None:
            return found
        if HistoryClock.objects.filter(pk=_CLOCK_PK).exists():
            return None  # locked by another recorder
        HistoryClock.objects.bulk_create([HistoryClock(pk=_CLOCK_PK)], ignore_conflicts=True)
    return None


def _rows(statement: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall()


def _record_minute(at: datetime, new_minute: bool) -> tuple[int, dict[str, Values]]:
    """Add each queue's change since its mark to the point of the minute of `at`, sample its
    gauges, move its mark. A queue gets a point when it moved or its gauges changed; all queues'
    series also once a minute while any task is held (so every minute has the gauges of all).
    Returns the points written, and the queues holding no task that did not move for
    RETIRE_AFTER, with their marks."""
    width = len(HISTORY_COLUMNS)
    points: list[tuple[Any, ...]] = []
    moved_marks: list[tuple[Any, ...]] = []
    idle: dict[str, Values] = {}
    minute = db_time(bucket(at, MINUTE))
    params = {"retired": counters.RETIRED, "idle": db_time(at - RETIRE_AFTER)}
    for queue, *values in sorted(_rows(sql.RECORDING, params)):
        now = tuple(int(v or 0) for v in values[:width])
        mark = tuple(int(v or 0) for v in values[width:])
        change = tuple(
            v if i in GAUGE_AT else v - m for i, (v, m) in enumerate(zip(now, mark, strict=True))
        )
        counted = any(c for i, c in enumerate(change) if i not in GAUGE_AT)
        gauges_moved = any(now[i] != mark[i] for i in GAUGE_AT)
        holding = any(now[i] for i in GAUGE_AT)
        sampled = queue == sql.ALL_QUEUES and new_minute and holding
        if counted or gauges_moved or sampled:
            points.append((MINUTE, queue, minute, *change))
        if counted or gauges_moved:
            moved_marks.append((queue, *now, db_time(at)))
        elif not holding and queue not in (sql.ALL_QUEUES, counters.RETIRED):
            idle[queue] = now  # RECORDING sends one that did not move only once idle so long
    _write(sql.add_to_points, points)
    _write(sql.set_marks, moved_marks)
    return len(points), idle


def _retire(idle: dict[str, Values], at: datetime) -> int:
    """Retire the counter rows of queues that hold no task and sat idle (counters.retire checks
    they still add up to their marks): their counts go to the RETIRED rows and their marks to
    its mark, so no series' next change moves. Their names are listed first (queue.names), so
    the list of queues keeps them."""
    if not idle:
        return 0
    names.catch_up()
    retired = counters.retire(
        {q: dict(zip(HISTORY_COLUMNS, v, strict=True)) for q, v in idle.items()}
    )
    if retired:
        names.named_by_tasks(retired)
        mark = (
            HistoryMark.objects.filter(queue=counters.RETIRED).values_list(*HISTORY_COLUMNS).first()
        ) or (0,) * len(HISTORY_COLUMNS)
        added = [sum(r[c] for r in retired.values()) for c in HISTORY_COLUMNS]
        moved = (m + a for m, a in zip(mark, added, strict=True))
        _write(sql.set_marks, [(counters.RETIRED, *moved, db_time(at))])
        HistoryMark.objects.filter(queue__in=list(retired)).delete()
    return len(retired)


def _compact(since: datetime, until: datetime) -> int:
    """Hour points of the hours in [since, until) from their minutes: counts and histograms
    summed, the gauges of each queue's last minute. Returns how many hours were written."""
    hours: dict[tuple[str, datetime], list[int]] = {}
    rows = _rows(sql.MINUTES_TO_COMPACT, [db_time(since), db_time(until)])
    for queue, at, *values in rows:  # by queue, then time: the last minute's gauges win
        start = bucket(aware(at) or since, HOUR)
        fold(hours.setdefault((queue, start), [0] * len(values)), values)
    _write(
        sql.set_points,
        [(HOUR, queue, db_time(start), *v) for (queue, start), v in sorted(hours.items())],
    )
    return len(hours)


def _prune(at: datetime, compacted_until: datetime) -> int:
    """Delete points older than the settings keep them; a minute only once its hour is
    compacted. A batch of each per minute: a backlog goes over the next minutes."""
    minutes = min(at - timedelta(minutes=broker_settings.BROKER_HISTORY_MINUTES), compacted_until)
    hours = at - timedelta(hours=broker_settings.BROKER_HISTORY_HOURS)
    pruned = 0
    with connection.cursor() as cursor:
        for step, before in ((MINUTE, minutes), (HOUR, hours)):
            cursor.execute(sql.PRUNE, [step, db_time(before), PRUNE_BATCH])
            pruned += max(cursor.rowcount, 0)
    return pruned


def _write(statement: Any, rows: Sequence[tuple[Any, ...]]) -> None:
    """Run statement(n) over rows, _ROWS_PER_STATEMENT at a time."""
    for chunk in _chunks(rows, _ROWS_PER_STATEMENT):
        with connection.cursor() as cursor:
            cursor.execute(statement(len(chunk)), [value for row in chunk for value in row])


def _chunks(rows: Sequence[tuple[Any, ...]], size: int) -> Iterable[Sequence[tuple[Any, ...]]]:
    return (rows[i : i + size] for i in range(0, len(rows), size))


def fold(total: list[int], values: Sequence[Any]) -> None:
    """A later point of one queue into its bucket: counts add up, the gauges are the later's."""
    for i, value in enumerate(values):
        total[i] = int(value or 0) + (0 if i in GAUGE_AT else total[i])


def db_time(value: datetime) -> Any:
    """A datetime as a raw statement's parameter (SQLite keeps naive UTC text)."""
    return connection.ops.adapt_datetimefield_value(value)

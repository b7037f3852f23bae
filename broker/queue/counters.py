"""Counter rows: what a move changes, moving them, folding deferred moves, retiring the rows of
queues with nothing left, one-snapshot reads."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import connection, transaction

from broker.models import (
    COUNTER_COLUMNS,
    GAUGE_COLUMNS,
    HISTOGRAM_COLUMNS,
    CounterDelta,
    QueueCounter,
)
from broker.queue import names, sqlparts
from broker.queue.base import shard
from broker.states import COUNTERS, GAUGE_STATES, TRANSITIONS

Deltas = dict[str, Counter[str]]  # queue → {column: change}
Move = tuple[str, str | None, str]  # (queue, state before or None for a new task, state after)

_GAUGES = frozenset(state.value for state in GAUGE_STATES)
RETIRED = sqlparts.RETIRED
# The per-queue gauges a read shows: the queues holding the most tasks. Clients name queues, and
# an answer listing each would grow with them.
SHOWN_QUEUES = 100
# Queues retired by one call: each is a few rows, locked and deleted in the caller's transaction.
RETIRE_BATCH = 1000


def count_moves(events: Sequence[str], moves: Iterable[Move]) -> Deltas:
    """Per queue, the counter and gauge changes of these moves (sqlparts.delta_expressions, here
    in Python).

    A move counts for the event of `events` whose from-states and target state it matches.
    """
    rules = [(TRANSITIONS[e][0], TRANSITIONS[e][1], TRANSITIONS[e][2]) for e in events]
    deltas: Deltas = defaultdict(Counter)
    for queue, old, new in moves:
        change = deltas[queue]
        for sources, target, counters in rules:
            if new == target and (old in sources if sources else old is None):
                for counter in counters:
                    change[counter] += 1
        if old in _GAUGES:
            change[old] -= 1
        if new in _GAUGES:
            change[new] += 1
    return deltas


def bump(deltas: Mapping[str, Mapping[str, int]], *, deferred: bool = False) -> None:
    """Apply `deltas` to the counter rows; call inside the transaction that moves the tasks.

    One statement for every queue, in queue order (see sqlparts.counted). `deferred` (a caller's
    transaction) appends delta rows instead of updating shared ones.
    """
    queues = sorted(q for q, change in deltas.items() if any(change.values()))
    if not queues:
        return
    columns = sorted({c for q in queues for c, n in deltas[q].items() if n})
    params: list[Any] = []
    if deferred:
        for queue in queues:
            params += [queue, *(deltas[queue].get(c, 0) for c in columns)]
        statement = sqlparts.append_deltas(columns, len(queues))
    else:
        where = shard()
        for queue in queues:
            params += [queue, where, *(deltas[queue].get(c, 0) for c in columns)]
        statement = sqlparts.upsert(columns, len(queues))
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def fold_deltas(limit: int = 1000) -> int:
    """Fold up to `limit` deferred delta rows into the counter rows; returns how many.

    One transaction: a reader sees the counts before or after, never both or neither.
    """
    with transaction.atomic():
        rows = list(
            CounterDelta.objects.order_by("pk")
            .select_for_update(skip_locked=True)
            .values_list("pk", "queue", *COUNTER_COLUMNS)[:limit]
        )
        if not rows:
            return 0
        deltas: Deltas = defaultdict(Counter)
        for _, queue, *values in rows:
            deltas[queue].update(dict(zip(COUNTER_COLUMNS, values, strict=True)))
        names.catch_up_with(deltas)
        CounterDelta.objects.filter(pk__in=[row[0] for row in rows]).delete()
        bump(deltas)
    return len(rows)


def stats(shown: int = SHOWN_QUEUES, also: Sequence[str] = ()) -> dict[str, Any]:
    """Gauges, totals and the histogram sums over every queue, with the gauges of the `shown`
    queues holding the most tasks and of those of `also` that hold any, read in one snapshot.
    `holding`: how many queues hold tasks (in any live state or dead)."""
    with connection.cursor() as cursor:
        cursor.execute(sqlparts.stats(len(also)), [RETIRED, shown, *also])
        rows = cursor.fetchall()
    sums: dict[str, int] = {}
    holding = 0
    per_queue: dict[str, dict[str, int]] = {}
    for queue, *values, last in rows:
        named = dict(zip(COUNTER_COLUMNS, values, strict=True))
        if queue is None:  # the sums of every row, and how many queues hold tasks
            sums = {c: int(v or 0) for c, v in named.items()}
            holding = int(last or 0)
        else:  # a queue shown (`last`: how many tasks it holds)
            per_queue[queue] = {state: int(named[state]) for state in GAUGE_COLUMNS}
    return {
        "gauges": {state: sums.get(state, 0) for state in GAUGE_COLUMNS},
        "totals": {name: sums.get(name, 0) for name in COUNTERS},
        "queues": dict(sorted(per_queue.items())),
        "histogram": {c: sums.get(c, 0) for c in HISTOGRAM_COLUMNS},
        "holding": holding,
    }


def queue_gauges(queues: Sequence[str]) -> dict[str, dict[str, int]]:
    """The gauges of these queues (each of them, zeros for a queue without rows)."""
    found = {name: dict.fromkeys(GAUGE_COLUMNS, 0) for name in queues}
    if queues:
        with connection.cursor() as cursor:
            cursor.execute(sqlparts.queue_gauges(len(queues)), [*queues, *queues])
            for queue, *values in cursor.fetchall():
                found[queue] = {g: int(v or 0) for g, v in zip(GAUGE_COLUMNS, values, strict=True)}
    return found


def live_queues() -> set[str]:
    """The queues with tasks ready, handed out or delayed."""
    with connection.cursor() as cursor:
        cursor.execute(sqlparts.LIVE_QUEUES)
        return {queue for (queue,) in cursor.fetchall()}


def totals() -> dict[str, int]:
    """The lifetime counters."""
    totals_now: dict[str, int] = stats(shown=0)["totals"]
    return totals_now


def gauges() -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Tasks in each live state now, overall and per queue (the SHOWN_QUEUES holding most)."""
    now = stats()
    return now["gauges"], now["queues"]


def retire(expected: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Move the counts of queues with nothing left into the RETIRED rows, and delete their rows:
    the reads and the sweeper then never see them again (until a task names them anew). Call
    inside a transaction that also moves what else holds their counts (history's marks).

    A queue of `expected` (at most RETIRE_BATCH) is retired when its counter rows that no move
    holds (SKIP LOCKED; the others stay, as do its deltas) add up exactly to `expected[queue]`
    and hold no task: so no gauge of any queue changes, nor any total. Returns each retired
    queue's sums, every column.
    """
    batch = sorted(q for q in expected if q != RETIRED)[:RETIRE_BATCH]
    rows = list(
        QueueCounter.objects.filter(queue__in=batch)
        .order_by("queue", "shard")
        .select_for_update(skip_locked=True)
        .values_list("pk", "queue", *COUNTER_COLUMNS)
    )
    sums: dict[str, Counter[str]] = defaultdict(Counter)
    ids: dict[str, list[int]] = defaultdict(list)
    for pk, queue, *values in rows:
        ids[queue].append(pk)
        sums[queue].update(dict(zip(COUNTER_COLUMNS, values, strict=True)))
    retired = {
        q: {c: sums[q][c] for c in COUNTER_COLUMNS}
        for q in sums
        if not any(sums[q][g] for g in GAUGE_COLUMNS)
        and all(sums[q][c] == n for c, n in expected[q].items())
    }
    if retired:
        QueueCounter.objects.filter(pk__in=[pk for q in retired for pk in ids[q]]).delete()
        moved = [sum(r[c] for r in retired.values()) for c in COUNTER_COLUMNS]
        with connection.cursor() as cursor:
            cursor.execute(sqlparts.upsert(COUNTER_COLUMNS, 1), [RETIRED, 0, *moved])
    return retired

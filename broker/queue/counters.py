"""Counter rows: what a move changes, moving them, folding deferred moves, one-snapshot reads."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import connection, transaction

from broker.models import COUNTER_COLUMNS, GAUGE_COLUMNS, HISTOGRAM_COLUMNS, CounterDelta
from broker.queue import sqlparts
from broker.queue.base import shard
from broker.states import COUNTERS, GAUGE_STATES, TRANSITIONS

Deltas = dict[str, Counter[str]]  # queue → {column: change}
Move = tuple[str, str | None, str]  # (queue, state before or None for a new task, state after)

_GAUGES = frozenset(state.value for state in GAUGE_STATES)
# The pseudo-queue holding counts from before counters were kept per queue; never listed.
LEGACY_QUEUE = ""


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
        CounterDelta.objects.filter(pk__in=[row[0] for row in rows]).delete()
        bump(deltas)
    return len(rows)


def stats() -> dict[str, Any]:
    """Gauges, totals, per-queue gauges and the histogram sums, read in one snapshot."""
    with connection.cursor() as cursor:
        cursor.execute(sqlparts.STATS)
        rows = cursor.fetchall()
    sums: Counter[str] = Counter()
    per_queue: dict[str, dict[str, int]] = {}
    for queue, *values in rows:
        named = dict(zip(COUNTER_COLUMNS, (int(v or 0) for v in values), strict=True))
        sums.update(named)
        gauges = {state: named[state] for state in GAUGE_COLUMNS}
        if queue != LEGACY_QUEUE and any(gauges.values()):
            per_queue[queue] = gauges
    return {
        "gauges": {state: sums[state] for state in GAUGE_COLUMNS},
        "totals": {name: sums[name] for name in COUNTERS},
        "queues": dict(sorted(per_queue.items())),
        "histogram": {c: sums[c] for c in HISTOGRAM_COLUMNS},
    }


def totals() -> dict[str, int]:
    """The lifetime counters."""
    totals_now: dict[str, int] = stats()["totals"]
    return totals_now


def gauges() -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Tasks in each live state now, overall and per queue (queues with live tasks)."""
    now = stats()
    return now["gauges"], now["queues"]

"""The SQL every statement of the state machine is built from: counter moves generated from
`states.TRANSITIONS`, the histogram bucket, the retry backoff, the counter upserts and the
one-snapshot stats read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from broker.models import COUNTER_COLUMNS, DURATION_BUCKETS
from broker.states import GAUGE_STATES, TRANSITIONS

_GAUGES = {state.value for state in GAUGE_STATES}
COUNTER_TABLE = "broker_queuecounter"
DELTA_TABLE = "broker_counterdelta"
# The pseudo-queue holding the counts of queues whose rows were retired (and those from before
# counters were kept per queue): part of every total, never listed.
RETIRED = ""


# Arrays go as binary parameters (%(name)b): psycopg's text format escapes every element with a
# regular expression, ten times slower (3 ms for 500 payloads, measured).
# Moved rows expose o (state before, NULL for a new task), n (state after) and, when timed, b:
# the histogram bucket of the claim → settle duration. Short names: psycopg caches the parsing of
# statements up to 4 KiB only, and the settle statement is near that.


def _literal(state: str) -> str:
    return "'" + str(getattr(state, "value", state)) + "'"


def _event_match(event: str) -> str:
    """SQL true for a moved row (o, n) that is this event."""
    sources, target, _ = TRANSITIONS[event]
    if not sources:
        old = "o IS NULL"
    elif len(sources) == 1:
        old = f"o = {_literal(next(iter(sources)))}"
    else:
        old = f"o IN ({', '.join(sorted(_literal(s) for s in sources))})"
    return f"n = {_literal(target)} AND {old}"


_BOUNDS = ",".join("Infinity" if b == float("inf") else repr(b) for b, _ in DURATION_BUCKETS)


def bucket(duration: str) -> str:
    """The index in DURATION_BUCKETS of the first bound >= `duration` (seconds)."""
    return f"(SELECT count(*) FROM unnest('{{{_BOUNDS}}}'::float8[]) x WHERE x < {duration})"


def delta_expressions(
    events: Sequence[str], *, timed: bool = False, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Counter column → aggregate over moved rows (queue, o, n[, b, us]); `extra`: more
    columns' aggregates (a counter no state move stands for, as "deduplicated")."""
    parts: dict[str, list[str]] = {c: [e] for c, e in (extra or {}).items()}
    gauges: set[str] = set()
    for event in events:
        sources, target, counters = TRANSITIONS[event]
        for counter in counters:
            parts.setdefault(counter, []).append(f"count(*) FILTER (WHERE {_event_match(event)})")
        gauges |= {str(getattr(s, "value", s)) for s in (*sources, target)} & _GAUGES
    exprs = {column: " + ".join(terms) for column, terms in parts.items()}
    for gauge in sorted(gauges):
        into, out = f"n = '{gauge}'", f"o = '{gauge}'"
        exprs[gauge] = f"count(*) FILTER (WHERE {into}) - count(*) FILTER (WHERE {out})"
    if timed:
        for i, (_, column) in enumerate(DURATION_BUCKETS):
            exprs[column] = f"count(*) FILTER (WHERE b = {i})"
        exprs["dur_sum_us"] = "coalesce(sum(us), 0)"
    return exprs


def counted(
    source: str,
    events: Sequence[str],
    *,
    timed: bool = False,
    deferred: bool = False,
    extra: Mapping[str, str] | None = None,
) -> str:
    """A CTE body moving the counters of the rows in `source`, grouped by queue.

    In queue order, so two statements that lock several queues' rows always lock them in the same
    order (no deadlock). `deferred` appends to the delta table instead (see CounterDelta).
    """
    exprs = delta_expressions(events, timed=timed, extra=extra)
    columns = ", ".join(exprs)
    values = ", ".join(exprs.values())
    if deferred:
        return (
            f"INSERT INTO {DELTA_TABLE} (queue, {columns}) "
            f"SELECT queue, {values} FROM {source} GROUP BY queue ORDER BY queue"
        )
    updates = ", ".join(f"{c} = c.{c} + excluded.{c}" for c in exprs)
    return (
        f"INSERT INTO {COUNTER_TABLE} AS c (queue, shard, {columns}) "
        f"SELECT queue, %(shard)s, {values} FROM {source} GROUP BY queue ORDER BY queue "
        f"ON CONFLICT (queue, shard) DO UPDATE SET {updates}"
    )


def upsert(columns: Sequence[str], rows: int) -> str:
    """Add to `rows` queues' counter rows (queue, shard, *columns); PostgreSQL and SQLite alike."""
    names = ", ".join(columns)
    marks = ", ".join(["%s"] * (len(columns) + 2))
    updates = ", ".join(f"{c} = c.{c} + excluded.{c}" for c in columns)
    return (
        f"INSERT INTO {COUNTER_TABLE} AS c (queue, shard, {names}) VALUES "
        + ", ".join([f"({marks})"] * rows)
        + f" ON CONFLICT (queue, shard) DO UPDATE SET {updates}"
    )


def append_deltas(columns: Sequence[str], rows: int) -> str:
    """Append `rows` delta rows (queue, *columns)."""
    marks = ", ".join(["%s"] * (len(columns) + 1))
    return f"INSERT INTO {DELTA_TABLE} (queue, {', '.join(columns)}) VALUES " + ", ".join(
        [f"({marks})"] * rows
    )


_ALL = ", ".join(COUNTER_COLUMNS)
_ROWS = (
    f"SELECT queue, {_ALL} FROM {COUNTER_TABLE} UNION ALL SELECT queue, {_ALL} FROM {DELTA_TABLE}"
)
_GAUGE_NAMES = [c for c in COUNTER_COLUMNS if c in _GAUGES]
_GAUGE_LIST = ", ".join(_GAUGE_NAMES)
_PER_QUEUE_GAUGES = (
    f"SELECT queue, {', '.join(f'sum({c}) AS {c}' for c in _GAUGE_NAMES)} FROM ("
    f"SELECT queue, {_GAUGE_LIST} FROM {COUNTER_TABLE}"
    f" UNION ALL SELECT queue, {_GAUGE_LIST} FROM {DELTA_TABLE}) AS u GROUP BY queue"
)
_HELD = " + ".join(_GAUGE_NAMES)
_HOLDS = " OR ".join(f"{c} <> 0" for c in _GAUGE_NAMES)
# A shown queue's row: its gauges in their columns, typed NULLs (a subquery's) in the others.
_SHOWN_COLUMNS = ", ".join(c if c in _GAUGES else "CAST(NULL AS BIGINT)" for c in COUNTER_COLUMNS)


def stats(also: int) -> str:
    """One statement, so one snapshot: gauges and totals read together always agree.

    A first row of the sums over every counter row (queue NULL) and how many queues hold tasks;
    then the gauges of the queues holding the most tasks (then by name), `%s` of them, and of
    `also` more queues named by parameter (those that hold any; a queue may come twice). The
    rows answered are bounded; the database sums the rows of the queues with counts
    (counters.retire keeps them to those that held tasks lately), grouping only their gauges.
    """
    asked = (
        f" UNION ALL SELECT queue, {_SHOWN_COLUMNS}, n FROM held"
        f" WHERE queue IN ({', '.join(['%s'] * also)})"
        if also
        else ""
    )
    return (
        f"WITH held AS (SELECT queue, {_GAUGE_LIST}, {_HELD} AS n FROM ({_PER_QUEUE_GAUGES}) AS g"
        f" WHERE queue <> %s AND ({_HOLDS}))"
        f" SELECT NULL, {', '.join(f'sum({c})' for c in COUNTER_COLUMNS)},"
        f" (SELECT count(*) FROM held) FROM ({_ROWS}) AS u"
        f" UNION ALL SELECT * FROM (SELECT queue, {_SHOWN_COLUMNS}, n FROM held"
        f" ORDER BY n DESC, queue LIMIT %s) AS busiest{asked}"
    )


def queue_gauges(names: int) -> str:
    """The gauges of `names` queues named by parameter (twice: counter rows, then deltas), one
    row per queue with any row."""
    marks = ", ".join(["%s"] * names)
    return (
        f"SELECT queue, {', '.join(f'sum({c})' for c in _GAUGE_NAMES)} FROM ("
        f"SELECT queue, {_GAUGE_LIST} FROM {COUNTER_TABLE} WHERE queue IN ({marks})"
        f" UNION ALL SELECT queue, {_GAUGE_LIST} FROM {DELTA_TABLE} WHERE queue IN ({marks})"
        ") AS u GROUP BY queue"
    )


# The queues with tasks ready, handed out or delayed (SQS's ListQueues lists them).
LIVE_QUEUES = f"SELECT queue FROM ({_PER_QUEUE_GAUGES}) AS g WHERE ready + handed_out + delayed > 0"


def backoff(attempts: str, jitter: str) -> str:
    """states.backoff_ms in SQL, in milliseconds: the same formula and, given the same jitter
    (uniform in [0, 1)), the same value (tests/unit holds them together)."""
    base = (
        "least(%(retry_max_ms)s::float8, %(retry_base_ms)s::float8"
        f" * power(2::float8, least(greatest({attempts} - 1, 0), 62)))"
    )
    return f"floor({base} / 2 + {jitter} * ({base} / 2))"

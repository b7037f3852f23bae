"""PostgreSQL statements for the hot transitions: the task move, its counters and its NOTIFY in
one statement, so enqueue, claim and ack each cost one round trip and one commit.

Only `broker.queue` runs these; on SQLite it takes the ORM path instead (SQLite has no
data-modifying CTEs). Built once at import: no per-call SQL compilation.
"""
from __future__ import annotations

from broker.models import DURATION_BUCKETS, CounterShard, Task
from broker.wakeup import CHANNEL

_COUNTERS = [f.column for f in CounterShard._meta.fields if not f.primary_key]


def _counted(source: str, deltas: dict[str, str], rows: str | None = None) -> str:
    """A CTE body adding aggregates over `source` to counter shard %(shard)s.

    An upsert, not an UPDATE: a shard row that is missing (a flushed test database) is created
    rather than silently not counted. Adds nothing when `source` is empty.
    """
    values = ", ".join(deltas.get(c, "0") for c in _COUNTERS)
    updates = ", ".join(f"{c} = s.{c} + EXCLUDED.{c}" for c in deltas)
    return (
        f"INSERT INTO broker_countershard AS s (shard, {', '.join(_COUNTERS)}) "
        f"SELECT %(shard)s, {values} FROM {rows or source} HAVING count(*) > 0 "
        f"ON CONFLICT (shard) DO UPDATE SET {updates}"
    )


def _duration_deltas(counter: str) -> dict[str, str]:
    """count(*) into `counter`, plus the claim → now histogram over column `dur` (seconds)."""
    deltas = {counter: "count(*)"}
    low = None
    for bound, column in DURATION_BUCKETS:
        cond = [] if low is None else [f"dur > {low!r}"]
        if bound != float("inf"):
            cond.append(f"dur <= {bound!r}")
        deltas[column] = f"count(dur) FILTER (WHERE {' AND '.join(cond)})"
        low = bound
    deltas["dur_sum_us"] = "coalesce(sum(greatest((dur * 1000000)::bigint, 0)), 0)"
    return deltas


_NEW_COLUMNS = [
    f.column for f in Task._meta.concrete_fields if not f.primary_key
]

ENQUEUE = (
    "WITH new AS ("
    f" INSERT INTO broker_task ({', '.join(_NEW_COLUMNS)})"
    f" VALUES ({', '.join(f'%({c})s' for c in _NEW_COLUMNS)})"
    " ON CONFLICT (idempotency_key) DO NOTHING"
    " RETURNING id, state, queue"
    f"), counted AS ({_counted('new', {'enqueued': 'count(*)'})})"
    f", notified AS (SELECT pg_notify('{CHANNEL}', queue || ':1') FROM new"
    "  WHERE state = 'ready')"
    " SELECT id, (SELECT count(*) FROM notified) FROM new"
)

# Many new tasks without idempotency keys, from parallel arrays: one statement, one commit.
# Ids come from the sequence in the SELECT's order, so ORDER BY id gives them back in request order.
ENQUEUE_MANY = (
    "WITH new AS ("
    " INSERT INTO broker_task (state, queue, priority, type, payload, attempts, max_attempts,"
    " available_at, created_at, updated_at)"
    " SELECT u.state, u.queue, u.priority, u.type, u.payload, 0, u.max_attempts,"
    " u.available_at, %(now)s, %(now)s"
    " FROM unnest(%(state)s::varchar[], %(queue)s::varchar[], %(priority)s::smallint[],"
    " %(type)s::varchar[], %(payload)s::text[], %(max_attempts)s::smallint[],"
    " %(available_at)s::timestamptz[])"
    " WITH ORDINALITY AS u(state, queue, priority, type, payload, max_attempts, available_at, n)"
    " ORDER BY u.n"
    " RETURNING id, state, queue"
    f"), counted AS ({_counted('new', {'enqueued': 'count(*)'})})"
    f", notified AS (SELECT pg_notify('{CHANNEL}', queue || ':' || count(*)) FROM new"
    "  WHERE state = 'ready' GROUP BY queue)"
    " SELECT id, (SELECT count(*) FROM notified) FROM new ORDER BY id"
)

_CLAIM_COLUMNS = (
    "id", "payload", "attempts", "max_attempts", "queue", "priority", "type", "created_at",
    "available_at",
)


def claim(queue_filter: str = "") -> str:
    """Pick up to %(limit)s ready tasks in claim order, skipping locked rows, and hand them out."""
    returning = ", ".join(f"t.{c}" for c in _CLAIM_COLUMNS)
    return (
        "WITH picked AS ("
        f" SELECT id FROM broker_task WHERE state = 'ready'{queue_filter}"
        " ORDER BY priority, available_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
        "), claimed AS ("
        " UPDATE broker_task t SET state = 'handed_out', attempts = t.attempts + 1,"
        " lease_id = %(lease_id)s, lease_deadline = %(deadline)s, claimed_at = %(now)s,"
        " worker = %(worker)s, updated_at = %(now)s"
        f" FROM picked WHERE t.id = picked.id RETURNING {returning}"
        f"), counted AS ({_counted('claimed', {'delivered': 'count(*)'})})"
        f" SELECT {', '.join(_CLAIM_COLUMNS)} FROM claimed"
        " ORDER BY priority, available_at, id"
    )


CLAIM_ANY = claim()
# One queue as `=`, not `= ANY(...)`: PostgreSQL then reads task_claim_queue_idx in claim order
# instead of sorting that queue's ready rows.
CLAIM_ONE_QUEUE = claim(" AND queue = %(queue)s")
CLAIM_QUEUES = claim(" AND queue = ANY(%(queues)s)")

ACK = (
    "WITH acked AS ("
    " UPDATE broker_task SET state = 'done', result = %(result)s, lease_id = NULL,"
    " lease_deadline = NULL, worker = NULL, updated_at = %(now)s"
    " WHERE id = %(id)s AND state = 'handed_out' AND lease_id = %(lease_id)s"
    " RETURNING queue, attempts, claimed_at"
    "), timed AS (SELECT extract(epoch FROM %(now)s - claimed_at) AS dur FROM acked)"
    f", counted AS ({_counted('acked', _duration_deltas('acked'), rows='timed')})"
    " SELECT queue, attempts FROM acked"
)

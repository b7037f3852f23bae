"""The PostgreSQL statements of a batch with unique keys (broker.queue.unique): each item's holder
in one probe per item, the new tasks in one insert, the pending holders absorbed in one update,
each with its counters, built once at import."""

from __future__ import annotations

from broker.queue.sqlparts import counted
from broker.queue.unique import _DEBOUNCED, _DEBOUNCED_READY, EVENTS, HELD, HOLDING
from broker.wakeup import CHANNEL


def _states(until: str) -> str:
    return ", ".join(repr(str(s.value)) for s in HOLDING[until])


# Per unique item (n, queue, key, until, period_s): its holder's id, queue, state, claimed_at and
# created_at, or no row. An index probe each (task_unique_key_idx).
HOLDERS = (
    "SELECT u.n, h.id, h.queue, h.state, h.claimed_at, h.created_at"  # noqa: S608
    " FROM unnest(%(n)s::int[], %(queue)s::varchar[], %(key)s::varchar[], %(until)s::varchar[],"
    " %(period_s)s::int[]) AS u(n, queue, key, until, period_s)"
    " CROSS JOIN LATERAL (SELECT id, queue, state, claimed_at, created_at FROM broker_task t"
    " WHERE t.unique_key = u.key AND t.queue = u.queue AND CASE u.until"
    f" WHEN 'finished' THEN t.state IN ({_states('finished')})"
    f" WHEN 'started' THEN t.state IN ({_states('started')})"
    " ELSE t.created_at > %(now)s - u.period_s * interval '1 second' END"
    " ORDER BY t.id LIMIT 1) AS h"
)

# The new tasks (an earlier item's new task absorbed `absorbed` later ones), as sqlenqueue's
# many-task insert with the idempotency and unique keys. Any unique index refuses a row silently:
# fewer new rows than asked means a race was lost, and the caller rolls back and looks again.
_INSERT = (
    "new AS (INSERT INTO broker_task (state, queue, priority, type, payload, attempts,"
    " max_attempts, backoff, available_at, created_at, updated_at, idempotency_key, unique_key,"
    " absorbed, enqueued_by)"
    " SELECT u.state, u.queue, u.priority, u.type, u.payload, 0, u.max_attempts, u.backoff,"
    " u.available_at, %(now)s, %(now)s, u.idem, u.unique_key, u.absorbed, u.enqueued_by"
    " FROM unnest(%(state)b::varchar[], %(queue)b::varchar[], %(priority)b::smallint[],"
    " %(type)b::varchar[], %(payload)b::text[], %(max_attempts)b::smallint[],"
    " %(backoff)b::boolean[], %(available_at)b::timestamptz[], %(idem)b::varchar[],"
    " %(unique_key)b::varchar[], %(absorbed)b::int[], %(enqueued_by)b::varchar[])"
    " WITH ORDINALITY AS u(state, queue, priority, type, payload, max_attempts, backoff,"
    " available_at, idem, unique_key, absorbed, enqueued_by, n) ORDER BY u.n"
    " ON CONFLICT DO NOTHING"
    " RETURNING id, queue, NULL::text AS o, state AS n, absorbed AS k)"
)


def _absorb(debounce: bool) -> str:
    # Per stored holder (id, k requests answered, the last replace's fields, the last
    # debounce's ms and cap or NULL): lock those still pending (a claim that took one meanwhile
    # has committed: it is left alone) and change them. Without a debounce no state changes:
    # the update's own re-check of a row changed meanwhile (READ COMMITTED) stands for the lock,
    # and the state after stands for the state before.
    lock = " ORDER BY t.id FOR UPDATE OF t" if debounce else ""
    before = "p.o" if debounce else "t.state"
    return (
        "v AS (SELECT * FROM unnest(%(id)s::bigint[], %(k)s::int[], %(replace)s::boolean[],"  # noqa: S608
        " %(r_payload)s::text[], %(r_type)s::varchar[], %(r_priority)s::smallint[],"
        " %(r_max_attempts)s::smallint[], %(debounce_ms)s::bigint[], %(debounce_max_ms)s::bigint[])"
        " AS v(id, k, replace, payload, type, priority, max_attempts, debounce_ms, cap))"
        ", p AS (SELECT t.id, t.state AS o, v.k, v.replace, v.payload, v.type, v.priority,"
        " v.max_attempts, least(%(now)s + v.debounce_ms * interval '1 ms',"
        " t.created_at + v.cap * interval '1 ms') AS at FROM broker_task t JOIN v ON t.id = v.id"
        f" WHERE t.claimed_at IS NULL AND t.state IN ('blocked', 'delayed', 'ready'){lock})"
        ", a AS (UPDATE broker_task t SET absorbed = t.absorbed + p.k, updated_at = %(now)s,"
        " payload = CASE WHEN p.replace THEN p.payload ELSE t.payload END,"
        " type = CASE WHEN p.replace THEN p.type ELSE t.type END,"
        " priority = CASE WHEN p.replace THEN p.priority ELSE t.priority END,"
        " max_attempts = CASE WHEN p.replace THEN p.max_attempts ELSE t.max_attempts END,"
        " state = CASE WHEN p.at IS NULL OR t.state = 'blocked' THEN t.state"
        f" WHEN p.at > %(now)s THEN '{_DEBOUNCED}' ELSE '{_DEBOUNCED_READY}' END,"
        " available_at = CASE WHEN p.at IS NULL THEN t.available_at WHEN t.state = 'blocked'"
        " THEN t.created_at + greatest(p.at - %(now)s, interval '0') ELSE p.at END"
        " FROM p WHERE t.id = p.id AND t.claimed_at IS NULL"
        " AND t.state IN ('blocked', 'delayed', 'ready')"
        f" RETURNING t.id, t.queue, {before} AS o, t.state AS n, p.k)"
        ", held AS (SELECT t.id, t.queue, v.k FROM broker_task t JOIN v ON t.id = v.id"
        " WHERE NOT EXISTS (SELECT 1 FROM a WHERE a.id = t.id))"
    )


_ANSWERED = {"deduplicated": "coalesce(sum(k), 0)"}


def _batch(insert: bool, absorb: bool, debounce: bool, deferred: bool) -> str:
    """A batch's new tasks and stored holders in one statement: the rows first (the inserts'
    waits on a racing insert of a key, the holders' locks), the counters last, as every other
    move takes them; so no two of them wait on each other crosswise. Rows out: (id, o, n): a
    new task (o NULL), an absorbed holder (o its state before) or a holder left as it was."""
    parts = ([_INSERT] if insert else []) + ([_absorb(debounce)] if absorb else [])
    moved = (["SELECT id, queue, o, n, k FROM new"] if insert else []) + (
        [
            "SELECT id, queue, o, n, k FROM a",
            f"SELECT id, queue, '{HELD}', '{HELD}', k FROM held",  # noqa: S608
        ]
        if absorb
        else []
    )
    return (
        f"WITH {', '.join(parts)}"  # noqa: S608
        f", moved AS ({' UNION ALL '.join(moved)})"
        f", counted AS ({counted('moved', EVENTS, deferred=deferred, extra=_ANSWERED)})"
        f", notified AS (SELECT pg_notify('{CHANNEL}', queue || ':' || count(*)) FROM moved"
        " WHERE n = 'ready' AND o IS DISTINCT FROM 'ready' GROUP BY queue)"
        " SELECT id, o, n, (SELECT count(*) FROM notified) FROM moved ORDER BY id"
    )


# (insert, absorb, debounce, deferred) → statement
BATCH = {
    (i, a, b, d): _batch(i, a, b, d)
    for i in (False, True)
    for a in (False, True)
    for b in (False, True)
    for d in (False, True)
    if i or a
}

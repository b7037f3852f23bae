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

_NEW_EVENTS = ("enqueue", "enqueue_delayed")


def _insert(deferred: bool) -> str:
    # As sqlenqueue's many-task insert, with the idempotency and unique keys and `absorbed` (an
    # earlier item's new task answered later ones). Any unique index refuses a row silently:
    # fewer ids than rows means a race was lost, and the caller rolls back and looks again.
    return (
        "WITH new AS ("  # noqa: S608
        " INSERT INTO broker_task (state, queue, priority, type, payload, attempts, max_attempts,"
        " backoff, available_at, created_at, updated_at, idempotency_key, unique_key, absorbed)"
        " SELECT u.state, u.queue, u.priority, u.type, u.payload, 0, u.max_attempts, u.backoff,"
        " u.available_at, %(now)s, %(now)s, u.idem, u.unique_key, u.absorbed"
        " FROM unnest(%(state)b::varchar[], %(queue)b::varchar[], %(priority)b::smallint[],"
        " %(type)b::varchar[], %(payload)b::text[], %(max_attempts)b::smallint[],"
        " %(backoff)b::boolean[], %(available_at)b::timestamptz[], %(idem)b::varchar[],"
        " %(unique_key)b::varchar[], %(absorbed)b::int[])"
        " WITH ORDINALITY AS u(state, queue, priority, type, payload, max_attempts, backoff,"
        " available_at, idem, unique_key, absorbed, n) ORDER BY u.n"
        " ON CONFLICT DO NOTHING"
        " RETURNING id, queue, NULL::text AS o, state AS n"
        f"), counted AS ({counted('new', _NEW_EVENTS, deferred=deferred)})"
        f", notified AS (SELECT pg_notify('{CHANNEL}', queue || ':' || count(*)) FROM new"
        "  WHERE n = 'ready' GROUP BY queue)"
        " SELECT id, (SELECT count(*) FROM notified) FROM new ORDER BY id"
    )


INSERT = _insert(deferred=False)
INSERT_IN_CALLER_TRANSACTION = _insert(deferred=True)


def _absorb(deferred: bool, debounce: bool) -> str:
    # Per holder (id, k requests answered, the last replace's fields or NULL, the last
    # debounce's ms and cap or NULL): lock those still pending (a claim that took one meanwhile
    # has committed: it is left alone), change them, and count every request answered. Without
    # a debounce no state changes: the update's own re-check of a row changed meanwhile (READ
    # COMMITTED) stands for the lock, and the state after stands for the state before.
    lock = " ORDER BY t.id FOR UPDATE OF t" if debounce else ""
    before = "p.o" if debounce else "t.state"
    return (
        "WITH v AS (SELECT * FROM unnest(%(id)s::bigint[], %(k)s::int[], %(replace)s::boolean[],"  # noqa: S608
        " %(payload)s::text[], %(type)s::varchar[], %(priority)s::smallint[],"
        " %(max_attempts)s::smallint[], %(debounce_ms)s::bigint[], %(debounce_max_ms)s::bigint[])"
        " AS v(id, k, replace, payload, type, priority, max_attempts, debounce_ms, cap))"
        ", p AS (SELECT t.id, t.state AS o, v.k, v.replace, v.payload, v.type, v.priority,"
        " v.max_attempts, least(%(now)s + v.debounce_ms * interval '1 ms',"
        " t.created_at + v.cap * interval '1 ms') AS at FROM broker_task t JOIN v ON t.id = v.id"
        " WHERE t.claimed_at IS NULL AND t.state IN ('blocked', 'delayed', 'ready')"
        f"{lock})"
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
        ", held AS (SELECT t.id, t.queue, t.state FROM broker_task t JOIN v ON t.id = v.id)"
        ", moved AS (SELECT id, queue, o, n, k FROM a UNION ALL"
        f" SELECT held.id, held.queue, '{HELD}', '{HELD}', v.k FROM held JOIN v ON held.id = v.id"
        " WHERE NOT EXISTS (SELECT 1 FROM a WHERE a.id = held.id))"
        f", counted AS ({counted('moved', EVENTS, deferred=deferred, extra=_ANSWERED)})"
        f", notified AS (SELECT pg_notify('{CHANNEL}', queue || ':' || count(*)) FROM moved"
        " WHERE n = 'ready' AND o <> 'ready' GROUP BY queue)"
        " SELECT id, queue, o, n, (SELECT count(*) FROM notified) FROM moved"
    )


_ANSWERED = {"deduplicated": "coalesce(sum(k), 0)"}
# (deferred, debounce) → statement
ABSORB = {(d, b): _absorb(d, b) for d in (False, True) for b in (False, True)}

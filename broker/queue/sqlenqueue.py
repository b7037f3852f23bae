"""The PostgreSQL enqueue statements, one task or many: each inserts the tasks, moves their
counter row and notifies their claimers in one statement, built once at import."""

from __future__ import annotations

from broker.models import Task
from broker.queue.sqlparts import counted
from broker.wakeup import CHANNEL

# -- enqueue ----------------------------------------------------------------------------------

# A new task's columns: what the enqueue gives, or a constant.
NEW_VALUES = (
    "key",
    "state",
    "queue",
    "priority",
    "type",
    "payload",
    "max_attempts",
    "available_at",
    "idempotency_key",
    "backoff",
    "enqueued_by",
    "unique_key",
)
_NEW_CONSTANTS = {
    "attempts": "0", "blockers": "0", "children": "0", "key_wait": "false", "absorbed": "0",
    "created_at": "%(now)s", "updated_at": "%(now)s",
}  # fmt: skip
NEW_COLUMNS = [f.column for f in Task._meta.concrete_fields if not f.primary_key]
_ENQUEUE_EVENTS = ("enqueue", "enqueue_delayed")


def new_value(column: str) -> str:
    if column in NEW_VALUES:
        return f"%({column})s"
    return _NEW_CONSTANTS.get(column, "NULL")


def _enqueue(deferred: bool) -> str:
    return (
        "WITH new AS ("
        f" INSERT INTO broker_task ({', '.join(NEW_COLUMNS)})"
        f" VALUES ({', '.join(new_value(c) for c in NEW_COLUMNS)})"
        # The partial unique index's predicate, for PostgreSQL to infer it (Task.Meta).
        " ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
        " RETURNING id, queue, NULL::text AS o, state AS n"
        f"), counted AS ({counted('new', _ENQUEUE_EVENTS, deferred=deferred)})"
        f", notified AS (SELECT pg_notify('{CHANNEL}', queue || ':1') FROM new WHERE n = 'ready')"
        " SELECT id, (SELECT count(*) FROM notified) FROM new"
    )


ENQUEUE = _enqueue(deferred=False)
ENQUEUE_IN_CALLER_TRANSACTION = _enqueue(deferred=True)


def _enqueue_many(deferred: bool) -> str:
    # Ids come from the sequence in the SELECT's order: ORDER BY id gives them in request order.
    return (
        "WITH new AS ("
        " INSERT INTO broker_task (state, queue, priority, type, payload, attempts, max_attempts,"
        " backoff, available_at, enqueued_by, created_at, updated_at)"
        " SELECT u.state, u.queue, u.priority, u.type, u.payload, 0, u.max_attempts, u.backoff,"
        " u.available_at, u.enqueued_by, %(now)s, %(now)s"
        " FROM unnest(%(state)b::varchar[], %(queue)b::varchar[], %(priority)b::smallint[],"
        " %(type)b::varchar[], %(payload)b::text[], %(max_attempts)b::smallint[],"
        " %(backoff)b::boolean[], %(available_at)b::timestamptz[], %(enqueued_by)b::varchar[])"
        " WITH ORDINALITY AS u(state, queue, priority, type, payload, max_attempts, backoff,"
        " available_at, enqueued_by, n) ORDER BY u.n"
        " RETURNING id, queue, NULL::text AS o, state AS n"
        f"), counted AS ({counted('new', _ENQUEUE_EVENTS, deferred=deferred)})"
        f", notified AS (SELECT pg_notify('{CHANNEL}', queue || ':' || count(*)) FROM new"
        "  WHERE n = 'ready' GROUP BY queue)"
        " SELECT id, (SELECT count(*) FROM notified) FROM new ORDER BY id"
    )


ENQUEUE_MANY = _enqueue_many(deferred=False)
ENQUEUE_MANY_IN_CALLER_TRANSACTION = _enqueue_many(deferred=True)

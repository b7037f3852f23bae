"""Every statement of the state machine, one named text per operation, built once at import
from the parts in sqlparts.py.

The PostgreSQL statements of the hot moves (enqueue, claim, settle) each move the tasks, their
counter row and their NOTIFY in one statement: one round trip, one commit. Their counter
expressions are generated from `states.TRANSITIONS`, so the guards, the target states and the
counters they move come from one table. Values always go as parameters.
"""

from __future__ import annotations

from broker.queue.base import API_TIME_SQL, MAX_KEPT_ERRORS
from broker.queue.sizing import DELIVERY_BYTES, NULL_BYTES, PARENT_BYTES
from broker.queue.sqlparts import DELTA_TABLE, backoff, bucket, counted
from broker.queue.sqlrelease import (
    LOCK_SETTLED,
    RELEASE_EVENTS,
    RELEASED,
    SETTLED_AND_RELEASED,
    in_one_statement,
    release_after,
)
from broker.states import State
from broker.wakeup import CHANNEL
from contract.limits import MAX_ANSWER_BYTES

__all__ = ["LOCK_SETTLED", "backoff"]  # backoff: tests hold the SQL one to states.backoff_ms

# -- claim ------------------------------------------------------------------------------------

# The task's fields a claim answers, in API.md's order: the times (made API text by SQL), then
# the holder's last checkpoint, so a redelivered task resumes from it.
_CLAIM_TIMES = ("created_at", "available_at")
CLAIM_COLUMNS = (
    "id", "payload", "attempts", "max_attempts", "queue", "priority", "type", *_CLAIM_TIMES,
    "after_policy",  # not NULL: the delivery carries its parents (dependencies.parents_of)
    "checkpoint",
    "key",
    "workflow_id", "ref",
    "event",
)  # fmt: skip
_CLAIM_ORDER = "priority, available_at, id"
# What a claim answers: the times already as API text (no parsing and formatting per row), and
# the claim order's keys beside them (the text of a time sorts only to the millisecond).
_CLAIM_OUT = (
    "SELECT "
    + ", ".join(f"{API_TIME_SQL.format(c)} AS {c}" if c in _CLAIM_TIMES else c
                for c in CLAIM_COLUMNS)
    + ", priority AS sort_p, available_at AS sort_a FROM claimed"
)  # fmt: skip
_OUT_NAMES = ", ".join(CLAIM_COLUMNS)


# A queue whose settings can hold a claim back (models.RESTRICTED, in SQL).
RESTRICTED = (
    "(paused OR max_in_flight IS NOT NULL OR rate_per_s IS NOT NULL OR fair"
    " OR key_max_in_flight IS NOT NULL)"
)
# A task a claim may take: ready, and not waiting for an earlier task of its key (an ordered
# queue's); the claim indexes hold exactly these rows.
CLAIMABLE = "state = 'ready' AND NOT key_wait"
QUEUE_TABLE = "broker_queue"
# The queues SQS's CreateQueue made: a claim that names no queue leaves them alone (API.md).
SQS_MADE = f"SELECT name FROM {QUEUE_TABLE} WHERE made_by_sqs"
_MARKER = ", ".join(["NULL"] * len(CLAIM_COLUMNS))  # and NULL sort keys: it sorts last


# A delivery's size as broker.queue.sizing reckons it, of a broker_task row `t`: its stored JSON
# (octet_length reads a value's header: nothing is detoasted) and the allowances.
DELIVERY_SIZE = (
    f"{DELIVERY_BYTES} + octet_length(t.payload)"
    f" + coalesce(octet_length(t.checkpoint), {NULL_BYTES})"
    f" + coalesce(octet_length(t.event), {NULL_BYTES})"
    " + CASE WHEN t.after_policy IS NULL THEN 0 ELSE (SELECT coalesce(sum("
    f"{PARENT_BYTES} + coalesce(octet_length(p.result), {NULL_BYTES})), 0)"
    " FROM broker_dependency d JOIN broker_task p ON p.id = d.parent_id"
    " WHERE d.child_id = t.id AND NOT d.key_order) END"
)


def _claim(
    picked: str, gate: str | None = None, prefix: str = "", many: bool = False, every: bool = False
) -> str:
    """Hand out the rows `picked` selects (locked, in claim order) and count them.

    `gate` (a condition on broker_queue rows, the claim's scope): the claim takes nothing when a
    restricted queue is in its scope, and answers one extra row of NULLs to say so; the caller
    then takes the restricted path. One statement reads the settings and claims, so a pause is
    obeyed by every process from the instant it commits, and no process caches anything.

    `many` (a claim of more than one): of the rows picked, only those before which the answer
    has not passed MAX_ANSWER_BYTES (as broker.queue.sizing reckons it) are handed out; the
    others are left as they were, ready.

    `every` (a claim that names no queue): the gate also holds while a queue made by SQS's
    CreateQueue exists, which only the restricted path steps over.
    """
    returning = ", ".join(f"t.{c}" for c in CLAIM_COLUMNS)
    gated = (
        f"gate AS MATERIALIZED (SELECT EXISTS (SELECT 1 FROM {QUEUE_TABLE}"
        f" WHERE {f'({RESTRICTED} OR made_by_sqs)' if every else RESTRICTED}{gate}) AS held), "
        if gate is not None
        else ""
    )
    marker = (
        f" UNION ALL SELECT {_MARKER}, NULL, NULL FROM gate WHERE held" if gate is not None else ""
    )
    fitting = (
        "), fitting AS (SELECT id FROM (SELECT s.id, sum(s.size) OVER"
        f" (ORDER BY s.priority, s.available_at, s.id) - s.size AS before FROM (SELECT t.id,"
        f" t.priority, t.available_at, {DELIVERY_SIZE} AS size FROM picked"
        f" JOIN broker_task t ON t.id = picked.id) AS s) AS f WHERE before <= {MAX_ANSWER_BYTES}"
        if many
        else ""
    )
    handed = "fitting AS picked" if many else "picked"
    return (
        f"WITH {prefix}{gated}picked AS ({picked}{fitting}"
        "), claimed AS ("
        # Saturated: a task with unlimited attempts must not overflow the smallint.
        " UPDATE broker_task t SET state = 'handed_out', attempts = least(t.attempts + 1, 32767),"
        " lease_id = %(lease_id)s, lease_deadline = %(deadline)s, claimed_at = %(now)s,"
        " worker = %(worker)s, updated_at = %(now)s"
        f" FROM {handed} WHERE t.id = picked.id RETURNING {returning},"
        " 'ready'::text AS o, t.state AS n"
        f"), counted AS ({counted('claimed', ('claim',))})"
        f" SELECT {_OUT_NAMES} FROM ({_CLAIM_OUT}{marker}) AS out"
        " ORDER BY sort_p, sort_a, id"
    )


_OPEN = " AND NOT (SELECT held FROM gate)"


def _pick(where: str, order: str = _CLAIM_ORDER) -> str:
    return (
        f"SELECT id FROM broker_task WHERE {CLAIMABLE}{where}{_OPEN}"
        f" ORDER BY {order} LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
    )


def _in_queue(name: str) -> str:
    """A claim's "this queue", written so that only task_claim_queue_idx can serve it.

    With `queue = $1` (a prepared statement's generic plan, or a LATERAL's q.name) PostgreSQL
    guesses that a queue holds 1/n_distinct of the ready rows, and may walk task_claim_idx in
    claim order, filtering by queue: an empty queue beside another's backlog of 300,000 then
    took 86 ms a claim. As a range the queue is no constant to it, so `ORDER BY queue, ...`
    stays, and only the per-queue index gives that order. The same rows: under the database's
    deterministic collation, `a <= b AND a >= b` is `a = b`.
    """
    return f" AND queue >= {name} AND queue <= {name}"


_QUEUE_ORDER = f"queue, {_CLAIM_ORDER}"


def _per_queue(source: str, limit: str, columns: str = "c.id") -> str:
    """Each queue's own index range (a LATERAL per queue of `source`), then the best `limit`.

    `queue = ANY(...)` would read every ready row of those queues and sort them.
    """
    return (
        f"SELECT {columns} FROM {source} CROSS JOIN LATERAL ("
        f"SELECT id,{' queue,' * (columns != 'c.id')} priority, available_at FROM broker_task"
        f" WHERE {CLAIMABLE}"
        f"{_in_queue('q.name')} ORDER BY {_QUEUE_ORDER} LIMIT {limit} FOR UPDATE SKIP LOCKED) AS c"
        " ORDER BY c.priority, c.available_at, c.id LIMIT %(limit)s"
    )


# Each takes nothing (and says so) when a restricted queue is in its scope: see _claim. Those
# of one task; then those of many, which stop adding tasks once the answer passes its size.
_ANY = (_pick(""), "")
_ONE_QUEUE = (_pick(_in_queue("%(queue)s"), _QUEUE_ORDER), " AND name = %(queue)s")
_QUEUES = (
    _per_queue(
        f"(SELECT name FROM unnest(%(queues)b::varchar[]) AS u(name) WHERE{_OPEN[4:]}) AS q",
        "%(limit)s",
    ),
    " AND name = ANY(%(queues)b::varchar[])",
)
CLAIM_ANY, CLAIM_ONE_QUEUE, CLAIM_QUEUES = (
    _claim(*c, every=c is _ANY) for c in (_ANY, _ONE_QUEUE, _QUEUES)
)

# The names of the queues with claimable tasks, by a loose index scan: one probe of
# task_claim_queue_idx per queue, so no queue's backlog is walked.
_READY_NAMES = (
    "RECURSIVE names(name) AS ("
    f"(SELECT queue FROM broker_task WHERE {CLAIMABLE} ORDER BY queue LIMIT 1)"
    " UNION ALL SELECT (SELECT t.queue FROM broker_task t WHERE t.state = 'ready'"
    " AND NOT t.key_wait AND t.queue > n.name ORDER BY t.queue LIMIT 1) FROM names n"
    " WHERE n.name IS NOT NULL), "
)
# Names no queue made by SQS's CreateQueue (a claim naming no queue leaves those alone).
_MATCHES = f" ~ ANY(%(regexes)s::text[]) AND name NOT IN ({SQS_MADE})"
# An access token's claim naming no queue (broker.tokens): the queues with ready tasks whose names
# match its grants' patterns (regular expressions), but those SQS made, each by its own index
# range, in this very statement; gated as the others when a restricted queue matches.
_MATCHING = (
    _per_queue(
        f"(SELECT name FROM names WHERE name IS NOT NULL AND name{_MATCHES}{_OPEN}) AS q",
        "%(limit)s",
    ),
    f" AND name{_MATCHES}",
)
CLAIM_MATCHING = _claim(*_MATCHING, prefix=_READY_NAMES)
CLAIM_MATCHING_MANY = _claim(*_MATCHING, prefix=_READY_NAMES, many=True)
CLAIM_ANY_MANY, CLAIM_ONE_QUEUE_MANY, CLAIM_QUEUES_MANY = (
    _claim(*c, many=True, every=c is _ANY) for c in (_ANY, _ONE_QUEUE, _QUEUES)
)


def sqlite_gated_pick(queues: list[str] | None, limit: int) -> tuple[str, list[object]]:
    """SQLite's read of the ready tasks to claim, with the marker row of a gated claim (see
    _claim): (statement, params)."""
    names = list(queues or ())
    marks = ", ".join(["%s"] * len(names))
    where = f" AND queue IN ({marks})" if names else f" AND queue NOT IN ({SQS_MADE})"
    gate = f"EXISTS (SELECT 1 FROM {QUEUE_TABLE} WHERE {RESTRICTED}" + (
        f" AND name IN ({marks}))" if names else ")"
    )
    statement = (
        f"SELECT * FROM (SELECT {', '.join(CLAIM_COLUMNS)} FROM broker_task"
        f" WHERE {CLAIMABLE}{where} AND NOT {gate} ORDER BY {_CLAIM_ORDER} LIMIT %s)"
        f" UNION ALL SELECT {_MARKER} WHERE {gate} ORDER BY {_CLAIM_ORDER}"
    )
    return statement, [*names, *names, limit, *names]


# -- claim: the restricted path (broker.queue.restricted) --------------------------------------

# The restricted queues of a scope; then the rows of its limited ones, which the claim locks.
LIMITED = f"NOT paused AND {RESTRICTED}"
# The restricted queues of a claim's scope (name, paused), and whether the scope has a claimable
# task at all (`ready`, on every row; one row of NULLs with it when none is restricted): when it
# has none, the claim answers nothing without locking or picking (an idle fair queue's parked
# polls, SQS receives). One probe of the per-queue index a named queue, as the claims read it.
_SCOPE_READY = (
    "EXISTS (SELECT 1 FROM unnest(%(scope)s::varchar[]) AS s(name) CROSS JOIN LATERAL ("
    "SELECT 1 FROM broker_task t WHERE t.state = 'ready' AND NOT t.key_wait"
    " AND t.queue >= s.name AND t.queue <= s.name ORDER BY t.queue LIMIT 1) AS c)"
)


def _restricted_in(ready: str, every: bool) -> str:
    """(name, paused, ready, sqs) rows: the restricted queues of the scope; of a claim that names
    no queue (every), those SQS made too (sqs true: not to claim from, but the one-statement
    claim's gate holds for them). Each condition implies queue_restricted_idx's."""
    queues = (
        f"SELECT name, paused, made_by_sqs AS sqs FROM {QUEUE_TABLE}"
        f" WHERE ({RESTRICTED} OR made_by_sqs)"
        if every
        else f"SELECT name, paused, false AS sqs FROM {QUEUE_TABLE}"
        f" WHERE {RESTRICTED} AND name = ANY(%(scope)s::varchar[])"
    )
    return (
        f"SELECT q.name, q.paused, r.ready, q.sqs FROM (SELECT {ready} AS ready) AS r"
        f" LEFT JOIN ({queues}) AS q ON true ORDER BY q.name"
    )


RESTRICTED_IN = _restricted_in(_SCOPE_READY, every=False)
RESTRICTED_IN_EVERY = _restricted_in(
    f"EXISTS (SELECT 1 FROM broker_task WHERE {CLAIMABLE})", every=True
)
LOCK_LIMITED = (
    "SELECT name, max_in_flight, rate_per_s, tokens, refilled_at, fair, key_max_in_flight"
    f" FROM {QUEUE_TABLE}"
    f" WHERE name = ANY(%(names)s::varchar[]) AND {LIMITED} ORDER BY name FOR UPDATE"
)
# A new statement after the locks: under READ COMMITTED it sees every claim committed while this
# one waited for them (one statement would not). The clock is the database's: one for all hosts.
IN_FLIGHT = (
    "SELECT clock_timestamp(), u.name, coalesce((SELECT sum(handed_out) FROM broker_queuecounter"
    " WHERE queue = u.name), 0) FROM unnest(%(names)s::varchar[]) AS u(name)"
)
SPEND_TOKENS = (
    f"UPDATE {QUEUE_TABLE} AS s SET tokens = u.tokens, refilled_at = %(at)s"
    " FROM unnest(%(names)s::varchar[], %(tokens)s::float8[]) AS u(name, tokens)"
    " WHERE s.name = u.name"
)


def _allowed(source: str, every: bool = False) -> str:
    """Queues of `source` (rows `name`) the claim may take from, each with its most: those it
    was allowed (`names`, at most `lims` each) and any other that is not restricted, read in
    this very statement (a queue paused a moment ago is not taken from); of a claim that names
    no queue, none that SQS made."""
    sqs = f" AND s.name NOT IN ({SQS_MADE})" if every else ""
    return (
        f"(SELECT s.name, coalesce(u.lim, %(limit)s) AS lim FROM {source} LEFT JOIN"
        " unnest(%(names)s::varchar[], %(lims)s::int[]) AS u(name, lim) ON u.name = s.name"
        " WHERE s.name IS NOT NULL AND (u.name IS NOT NULL OR s.name <> ALL(ARRAY("
        f"SELECT name FROM {QUEUE_TABLE} WHERE {RESTRICTED}))){sqs}) AS q"
    )


# The queues with claimable tasks (one probe of task_claim_queue_idx each: no queue's backlog is
# walked) whose names match one of the regular expressions: a token's claim that names no queue.
READY_QUEUES_MATCHING = (
    f"WITH {_READY_NAMES[:-2]} SELECT name FROM names WHERE name IS NOT NULL AND name{_MATCHES}"
)

# Hand out the tasks a keyed pick chose (broker.queue.keyclaims), if still claimable.
CLAIM_IDS = _claim(
    f"SELECT id FROM broker_task WHERE id = ANY(%(ids)s) AND {CLAIMABLE}"
    " ORDER BY id FOR UPDATE SKIP LOCKED"
)
_SCOPE = "unnest(%(scope)s::varchar[]) AS s(name)"
CLAIM_ALLOWED = _claim(_per_queue(_allowed(_SCOPE), "q.lim"))
CLAIM_ALLOWED_EVERY = _claim(
    _per_queue(_allowed("names AS s", every=True), "q.lim"), prefix=_READY_NAMES
)
# The same choice without handing out (the rows locked): a scope with fair or key-capped
# queues too, whose picks (broker.queue.keyclaims) are merged with these in claim order.
_PICKED = "c.id, c.queue, c.priority, c.available_at"
PICK_ALLOWED = _per_queue(_allowed(_SCOPE), "q.lim", _PICKED)
PICK_ALLOWED_EVERY = (
    f"WITH {_READY_NAMES[:-2]} {_per_queue(_allowed('names AS s', every=True), 'q.lim', _PICKED)}"
)

# -- settle: ack and nack, one or many --------------------------------------------------------

_ACK_ITEMS = (
    " SELECT a.n AS pos, a.id, a.lease_id, a.body, 'ack'::text AS kind, 0::float8 AS jitter"
    " FROM unnest(%(ack_ids)b::bigint[], %(ack_leases)b::text[], %(ack_bodies)b::text[])"
    " WITH ORDINALITY AS a(id, lease_id, body, n)"
)
_NACK_ITEMS = (
    " SELECT %(acks)s + k.n AS pos, k.id, k.lease_id, k.body, 'nack'::text AS kind, k.jitter"
    " FROM unnest(%(nack_ids)b::bigint[], %(nack_leases)b::text[], %(nack_bodies)b::text[],"
    " %(nack_jitter)b::float8[]) WITH ORDINALITY AS k(id, lease_id, body, jitter, n)"
)
_RETRY = "p.retry"
# A settled task frees a slot of a queue that caps its tasks in flight: wake its claimers.
_FREED = (
    f", freed AS (SELECT pg_notify('{CHANNEL}', m.queue || ':' || count(*)) FROM moved m"
    f" JOIN {QUEUE_TABLE} s ON s.name = m.queue WHERE (s.max_in_flight IS NOT NULL"
    " OR s.key_max_in_flight IS NOT NULL) AND NOT s.paused GROUP BY m.queue)"
)


def _settle(acks: bool, nacks: bool) -> str:
    """The settle statement for acks, nacks or both (each alone is shorter: psycopg caches the
    parsing of statements up to 4 KiB, and PostgreSQL plans less).

    Items are numbered acks first, then nacks; `wanted` keeps the first of repeated (id, lease)
    pairs. Rows are locked in id order, then their dependants in id order (all after the items:
    see in_one_statement). The last SELECT reads the tasks as they were before this statement: an
    item not settled is a 409 when its task was handed out under another lease, a 404 when an
    earlier item of the same task settled it, a 3 when it is still held under its own (not safe
    in one statement, see in_one_statement, or settled meanwhile by another request: the caller
    settles it again, locking first), else a 404. A
    nacked task without backoff waits 0 ms in delayed (the sweeper's next tick promotes it);
    max_attempts NULL never buries.
    """
    items = " UNION ALL".join(p for p, on in ((_ACK_ITEMS, acks), (_NACK_ITEMS, nacks)) if on)
    if acks and nacks:
        state = f"CASE WHEN p.kind = 'ack' THEN 'done' WHEN {_RETRY} THEN 'delayed' ELSE 'dead' END"
        result = "CASE WHEN p.kind = 'ack' THEN p.body ELSE t.result END"
        error = "CASE WHEN p.kind = 'nack' THEN p.body ELSE t.last_error END"
        retry = f"p.kind = 'nack' AND {_RETRY}"
    elif acks:
        state, result, error, retry = "'done'", "p.body", "t.last_error", ""
    else:
        state = f"CASE WHEN {_RETRY} THEN 'delayed' ELSE 'dead' END"
        result, error, retry = "t.result", "p.body", _RETRY
    available = (
        f"CASE WHEN {retry} THEN %(now)s + p.wait * interval '1 millisecond'"
        " ELSE t.available_at END"
        if retry
        else "t.available_at"
    )
    wait = (
        ", (t.max_attempts IS NULL OR t.attempts < t.max_attempts) AS retry,"
        f" CASE WHEN t.backoff THEN {backoff('t.attempts', 'w.jitter')} ELSE 0 END AS wait"
        if nacks
        else ""
    )
    events = ("ack",) * acks + ("nack_retry", "nack_bury") * nacks
    ids = " || ".join(
        p for p, on in (("%(ack_ids)b::bigint[]", acks), ("%(nack_ids)b::bigint[]", nacks)) if on
    )
    # A task with unlimited attempts (max_attempts NULL) never reaches the DLQ, where a requeue
    # would trim its history: its nacks keep the newest errors only (this one is not yet visible
    # to the DELETE, hence one fewer).
    errors = (
        "), errors AS (INSERT INTO broker_taskerror (task_id, attempt, at, error)"
        " SELECT id, attempts, %(now)s, body FROM moved WHERE kind = 'nack'"
        "), trimmed AS (DELETE FROM broker_taskerror WHERE id IN (SELECT id FROM ("
        " SELECT e.id, row_number() OVER (PARTITION BY e.task_id ORDER BY e.id DESC) AS r"
        " FROM broker_taskerror e JOIN moved m ON e.task_id = m.id WHERE m.kind = 'nack'"
        f" AND m.max_attempts IS NULL AND m.attempts > {MAX_KEPT_ERRORS}) AS x"
        f" WHERE r > {MAX_KEPT_ERRORS - 1})"
        if nacks
        else ""
    )
    return (
        f"WITH items AS ({items}"
        "), wanted AS ("
        " SELECT DISTINCT ON (id, lease_id) * FROM items WHERE id IS NOT NULL"
        " ORDER BY id, lease_id, pos"
        "), picked AS ("
        f" SELECT t.id, t.attempts, t.claimed_at, w.pos, w.kind, w.body{wait}"
        " FROM broker_task t JOIN wanted w ON t.id = w.id AND t.lease_id = w.lease_id"
        # By key: a generic plan, guessing 100 items, would rather scan every handed-out task.
        f" WHERE t.id = ANY({ids}) AND t.state = 'handed_out'"
        f" AND {in_one_statement('t', 't.id', '%(top)s')}"
        " ORDER BY t.id FOR UPDATE OF t"
        "), moved AS ("
        f" UPDATE broker_task t SET state = {state}, result = {result}, last_error = {error},"
        f" available_at = {available},"
        " lease_id = NULL, lease_deadline = NULL, worker = NULL, updated_at = %(now)s"
        " FROM picked p WHERE t.id = p.id"
        " RETURNING t.id, t.queue, t.attempts, t.max_attempts, t.children, p.pos, p.kind,"
        " p.body, 'handed_out'::text AS o,"
        f" t.state AS n, {bucket('extract(epoch FROM %(now)s - p.claimed_at)')} AS b,"
        " greatest((extract(epoch FROM %(now)s - p.claimed_at) * 1000000)::bigint, 0) AS us"
        f"{errors}"
        f"){release_after('moved')}"
        f", counted AS ({counted(SETTLED_AND_RELEASED, (*events, *RELEASE_EVENTS), timed=True)})"
        f"{_FREED}"
        " SELECT i.pos, CASE WHEN m.id IS NOT NULL THEN 0"
        "  WHEN cur.state = 'handed_out' AND cur.lease_id <> i.lease_id THEN 2"
        "  WHEN cur.state = 'handed_out' AND i.id NOT IN (SELECT id FROM moved) THEN 3 ELSE 1 END,"
        f" m.queue, m.attempts, m.n, (SELECT count(*) FROM freed), {RELEASED}"
        " FROM items i LEFT JOIN moved m ON m.pos = i.pos"
        " LEFT JOIN broker_task cur ON cur.id = i.id ORDER BY i.pos"
    )


SETTLE = _settle(acks=True, nacks=True)
# One ack, the hot path of a one-task-at-a-time worker: an UPDATE by key and its counters. When it
# moves nothing, the caller reads the task once to tell 404 from 409 (or, still held under this
# lease, acks it again after LOCK_SETTLED: see in_one_statement).
ACK_ONE = (
    "WITH moved AS ("
    " UPDATE broker_task t SET state = 'done', result = %(body)s, lease_id = NULL,"
    " lease_deadline = NULL, worker = NULL, updated_at = %(now)s"
    " WHERE t.id = %(id)s AND t.state = 'handed_out' AND t.lease_id = %(lease_id)s"
    f" AND {in_one_statement('t', '%(id)s', '%(id)s')}"
    " RETURNING t.id, t.queue, t.attempts, t.children, 'handed_out'::text AS o, t.state AS n,"
    f" {bucket('extract(epoch FROM %(now)s - t.claimed_at)')} AS b,"
    " greatest((extract(epoch FROM %(now)s - t.claimed_at) * 1000000)::bigint, 0) AS us"
    f"){release_after('moved')}"
    f", counted AS ({counted(SETTLED_AND_RELEASED, ('ack', *RELEASE_EVENTS), timed=True)})"
    f"{_FREED}"
    f" SELECT queue, attempts, (SELECT count(*) FROM freed), {RELEASED} FROM moved"
)
SETTLE_ACKS = _settle(acks=True, nacks=False)
SETTLE_NACKS = _settle(acks=False, nacks=True)

# -- the sweeper's look --------------------------------------------------------------------------

# Which of the sweeper's moves have anything to move (sweeps.pending), in one statement on either
# database: each EXISTS is a move's condition (Task.objects.expired, .due, schedules.fire_due,
# counters.fold_deltas) on the partial index that move walks. Parameters: now, three times.
PENDING = f"""SELECT
  EXISTS (SELECT 1 FROM broker_task WHERE state = '{State.HANDED_OUT.value}'
          AND lease_deadline < %s),
  EXISTS (SELECT 1 FROM broker_task WHERE state = '{State.DELAYED.value}' AND available_at <= %s),
  EXISTS (SELECT 1 FROM broker_schedule WHERE NOT paused AND next_run_at <= %s),
  EXISTS (SELECT 1 FROM {DELTA_TABLE}),
  EXISTS (SELECT 1 FROM broker_eventwait WHERE deadline <= %s)"""


def _cache_their_parsing() -> None:
    """psycopg turns a statement's %(name)s placeholders into $n by scanning its text on every
    call, unless the text is at most MAX_CACHED_STATEMENT_LENGTH (4 KiB) long: the settles, with
    the release of dependants, are longer (17 us a call measured). Its limit is a module global
    read per call; raise it to hold every statement here (tests/unit asserts they are cached)."""
    try:
        from psycopg import _queries
    except ImportError:  # pragma: no cover - SQLite-only installs
        return
    longest = max(len(text) for text in globals().values() if isinstance(text, str))
    _queries.MAX_CACHED_STATEMENT_LENGTH = max(_queries.MAX_CACHED_STATEMENT_LENGTH, longest)


_cache_their_parsing()

"""Claims from queues with `fair` or `key_max_in_flight` (API.md "Keys"), decided under the
queue's settings row lock that broker.queue.restricted takes: one claim of such a queue at a time,
so what a pick reads (the keys' last hand-outs, their tasks in flight) is what it acts on.

- fair: among the claimable tasks of keys not full, of the highest priority present among them,
  the oldest task of the key whose last hand-out is longest ago (keyless tasks are the key "";
  keys never served come first, oldest first: keys.unserved). A claim of n takes them round by
  round, as n single claims in a row would: one task of each key in that order, then a second
  of each, ...; when the priority changes, the keys this claim served go after the others, in
  the order it served them; their `served_at` then moves on in that order. The keys awake are
  walked in `served_at` order (keystate_awake_idx; keys with nothing to claim sleep:
  keys.sleep), each probed once on task_key_claim_idx: one key's backlog is one probe, never
  walked. A round that finds one key alone at the top priority (a queue whose tasks have no
  key: an SQS standard queue, fair from its CreateQueue) takes that key's next tasks in one more
  probe, as the rounds to come would one by one: a claim of n costs the same few statements
  whatever n is.
- key_max_in_flight: a key with that many tasks handed out is skipped until one of them ends
  (one that reaches it within a claim too); keyless tasks are not limited. Without `fair` the
  queue keeps claim order (priority, oldest), walking past the ready tasks of full keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection

from broker.models import KeyState, Task
from broker.queue.base import current_time
from broker.queue.keys import KEYLESS, UNSERVED_LEAD, unserved
from broker.queue.sql import CLAIMABLE
from broker.states import Priority

IN_FLIGHT = (
    "SELECT key, count(*) FROM broker_task WHERE queue = %(queue)s AND key IS NOT NULL"
    " AND state = 'handed_out' GROUP BY key"
)
# The claimable tasks of a queue not full nor taken yet, as a range on the queue (sql._in_queue:
# only the per-queue indexes can serve it, whatever the statistics).
_OPEN = (
    f"{CLAIMABLE} AND queue >= %(queue)s AND queue <= %(queue)s"
    " AND (key IS NULL OR key <> ALL(%(full)s)) AND id <> ALL(%(taken)s)"
)
_KEY = "COALESCE(t.key, '')"
# The probes of task_key_claim_idx (queue, priority, key, available_at, id) name the queue, the
# priority and the key (or a range of keys) by equality, not as sql._in_queue's ranges: with a
# range on the queue, PostgreSQL (15) positions the scan by every column but ends it by the
# queue alone, so a probe that finds nothing would read the rest of the queue's tasks. With the
# three leading columns fixed, no other index serves the probe as well, whatever the statistics.


def _any_of(keys: str, priority: int) -> str:
    """Whether the queue has a claimable task not taken yet of `priority` whose key is in the
    range `keys`: one probe of task_key_claim_idx, ended by the range."""
    return (
        "(SELECT 1 FROM broker_task t WHERE t.state = 'ready' AND NOT t.key_wait"
        f" AND t.queue = %(queue)s AND t.priority = {priority} AND {keys}"
        f" AND t.id <> ALL(%(taken)s) ORDER BY {_KEY} LIMIT 1) IS NOT NULL"
    )


def _of_keys_not_full(priority: int) -> str:
    """Whether a key not full has a claimable task of `priority`: the keyless tasks, then each
    range of keys between two full ones (`los`, `his`: the full keys sorted, '' first), then the
    keys after the last (`above`). The full keys' own tasks, however many, are never read."""
    between = (
        "EXISTS (SELECT 1 FROM unnest(%(los)s::varchar[], %(his)s::varchar[]) AS g(lo, hi)"
        f" WHERE {_any_of(f'{_KEY} > g.lo AND {_KEY} < g.hi', priority)})"
    )
    return (
        f"{_any_of(f'{_KEY} = {chr(39) * 2}', priority)}"
        f" OR {between} OR {_any_of(f'{_KEY} > %(above)s', priority)}"
    )


# The highest priority among the claimable tasks of keys not full; no row when none. The first
# claimable task in claim order (task_claim_queue_idx, as the plain claim reads it) says it at
# once unless its key is full; then each priority from its own in turn (COALESCE stops at the
# first found), a few probes each (_of_keys_not_full).
_TOP = (
    "SELECT CASE WHEN f.key <> ALL(%(full)s) THEN f.priority ELSE COALESCE("
    + ", ".join(
        f"(SELECT {p} WHERE {p} >= f.priority AND ({_of_keys_not_full(p)}))"
        for p in Priority.values
    )
    + ") END::smallint AS priority FROM (SELECT priority, COALESCE(key, '') AS key"
    f" FROM broker_task WHERE {CLAIMABLE} AND queue >= %(queue)s AND queue <= %(queue)s"
    " AND id <> ALL(%(taken)s) ORDER BY queue, priority, available_at, id LIMIT 1) AS f"
)
# A round: the keys in turn, each probed once on task_key_claim_idx for its oldest task of the
# top priority (by equality: see _KEY). First the keys not served by this claim yet, by their
# last hand-out (the awake ones: keystate_awake_idx; a key asleep has nothing claimable,
# keys.sleep), unless the round before was of the same priority (it walked them all: none has a
# task of it left); then the keys this claim served, in the order it served them last, as their
# `served_at` will say.
# Nothing is walked when nothing is claimable.
FAIR_ROUND = (
    f"WITH top AS MATERIALIZED ({_TOP}), k AS ("
    "(SELECT key FROM broker_keystate WHERE queue >= %(queue)s AND queue <= %(queue)s"
    " AND asleep_until IS NULL AND key <> ALL(%(full)s) AND key <> ALL(%(recent)s)"
    " AND (SELECT priority FROM top) IS DISTINCT FROM %(last)s::smallint"
    " AND (SELECT priority FROM top) IS NOT NULL"
    " ORDER BY queue, served_at, key)"
    " UNION ALL (SELECT key FROM unnest(%(recent)s::varchar[]) WITH ORDINALITY AS r(key, n)"
    " WHERE key <> ALL(%(full)s) AND (SELECT priority FROM top) IS NOT NULL ORDER BY n))"
    " SELECT c.id, k.key, c.priority, c.available_at FROM k CROSS JOIN LATERAL ("
    "SELECT t.id, t.priority, t.available_at FROM broker_task t WHERE t.state = 'ready'"
    " AND NOT t.key_wait AND t.queue = %(queue)s AND t.priority = (SELECT priority FROM top)"
    f" AND {_KEY} = k.key AND t.id <> ALL(%(taken)s)"
    " ORDER BY t.available_at, t.id LIMIT 1) AS c"
    " LIMIT %(most)s"
)
IN_ORDER = (
    f"SELECT id, key, priority, available_at FROM broker_task WHERE {_OPEN}"
    " ORDER BY queue, priority, available_at, id LIMIT %(most)s"
)
# A fair round that found one key alone at the top priority: that key's next tasks at the same
# priority (the priority of the task the round took), in the order the rounds to come would take.
MORE_OF_KEY = (
    "SELECT id, key, priority, available_at FROM broker_task WHERE state = 'ready'"
    " AND NOT key_wait AND queue = %(queue)s AND priority = %(priority)s"
    " AND COALESCE(key, '') = %(key)s AND id <> ALL(%(taken)s)"
    " ORDER BY available_at, id LIMIT %(most)s"
)
# Before a fair claim's rounds, in one statement: the keys whose sleep is over (their first
# delayed task is due: keys.sleep) woken (a WITH that writes runs whether read or not), and the
# keyless tasks' row made when missing: never served, appeared with its oldest claimable task
# (as keys do with their first task; keys.unserved). The probe runs only when the row is missing.
PREPARE = (
    "WITH woken AS (UPDATE broker_keystate SET asleep_until = NULL WHERE queue = %(queue)s"
    " AND asleep_until <= %(now)s::timestamptz RETURNING 1)"
    " INSERT INTO broker_keystate (queue, key, served_at) SELECT %(queue)s::varchar, '',"
    " COALESCE((SELECT created_at FROM broker_task WHERE state = 'ready' AND NOT key_wait"
    " AND queue = %(queue)s AND COALESCE(key, '') = '' ORDER BY priority, available_at, id"
    " LIMIT 1), %(now)s::timestamptz) - %(lead)s::interval"
    " WHERE NOT EXISTS (SELECT 1 FROM broker_keystate WHERE queue = %(queue)s AND key = '')"
    " ON CONFLICT (queue, key) DO NOTHING"
)
SERVED = (
    "INSERT INTO broker_keystate AS k (queue, key, served_at)"
    " SELECT %(queue)s, u.key, clock_timestamp() FROM unnest(%(keys)s::varchar[])"
    " WITH ORDINALITY AS u(key, n) ORDER BY u.n"
    " ON CONFLICT (queue, key) DO UPDATE SET served_at = excluded.served_at"
)


class Picked(NamedTuple):
    """A task a pick chose, with what a claim over several queues orders it by."""

    pk: int
    key: str | None
    priority: int
    available_at: datetime


def pick(queue: str, most: int, *, fair: bool, key_max: int | None) -> list[Picked]:
    """Up to `most` claimable tasks of `queue`, in the order to take them: those `most` single
    claims in a row would take. Call under the queue's row lock, then hand them out; for a fair
    queue then call served() with the keys of those taken."""
    if most <= 0:
        return []
    held = in_flight(queue) if key_max is not None else Counter()
    room = {key: key_max - n for key, n in held.items()} if key_max is not None else {}
    taken: list[Picked] = []
    recent: dict[str, None] = {}  # keys this claim served, the last served last
    last: int | None = None  # the priority of the round before
    if fair:
        _prepare(queue)
    while len(taken) < most:
        full = sorted(key for key, left in room.items() if left <= 0)
        params = {
            "queue": queue, "most": most - len(taken), "full": full,
            "taken": [t.pk for t in taken], "recent": list(recent), "last": last,
            # The ranges of keys between full ones (_of_keys_not_full).
            "los": [KEYLESS, *full[:-1]] if full else [], "his": full,
            "above": full[-1] if full else KEYLESS,
        }  # fmt: skip
        rows = _fair_round(params) if fair else _in_order(params)
        if not rows:
            break
        if fair and len(rows) == 1 and len(taken) < most - 1:
            # One key alone has claimable tasks at the top priority (most often the keyless
            # one): each round to come would take its next task, so take them in one probe.
            rows += _more_of_key(params, rows[0])
        for row in rows:
            if key_max is not None and row.key not in (None, KEYLESS):
                left = room.get(row.key, key_max)
                if left <= 0:
                    continue  # this round took the key's last slot already
                room[row.key] = left - 1
            taken.append(row)
            recent.pop(row.key or KEYLESS, None)
            recent[row.key or KEYLESS] = None
        last = rows[0].priority
    return taken


def served(queue: str, keys: Sequence[str | None]) -> None:
    """The keys of the tasks a fair claim took, in the order it took them: served now."""
    order = list(dict.fromkeys(key or KEYLESS for key in reversed(keys)))[::-1]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(SERVED, {"queue": queue, "keys": order})
        return
    for key in order:  # SQLite: one write lock anyway; times in the order taken
        KeyState.objects.update_or_create(queue=queue, key=key,
                                          defaults={"served_at": current_time()})  # fmt: skip


def in_flight(queue: str) -> Counter[str]:
    """How many tasks of each key of `queue` are handed out now (keyless ones not counted)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(IN_FLIGHT, {"queue": queue})
            return Counter({key: int(n) for key, n in cursor.fetchall()})
    rows = Task.objects.filter(queue=queue, key__isnull=False, state="handed_out")
    return Counter(rows.values_list("key", flat=True))


def _prepare(queue: str) -> None:
    """Before a fair claim's rounds: wake the keys whose sleep is over, and make the keyless
    tasks' KeyState row, so a round walks them as a key of their own."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(PREPARE, {"queue": queue, "now": current_time(), "lead": UNSERVED_LEAD})
        return
    if KeyState.objects.filter(queue=queue, key=KEYLESS).exists():
        return
    oldest = (
        Task.objects.ready([queue]).filter(key__isnull=True).claim_order()
        .values_list("created_at", flat=True).first()
    )  # fmt: skip
    at = unserved(oldest or current_time())
    KeyState.objects.get_or_create(queue=queue, key=KEYLESS, defaults={"served_at": at})


def _fetch(statement: str, params: dict[str, Any]) -> list[Picked]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    return [Picked(pk, key or None, priority, at) for pk, key, priority, at in rows]


def _fair_round(params: dict[str, Any]) -> list[Picked]:
    if connection.vendor == "postgresql":
        return _fetch(FAIR_ROUND, params)
    return _fair_round_generic(params)


def _more_of_key(params: dict[str, Any], first: Picked) -> list[Picked]:
    """Up to params["most"] - 1 more tasks of `first`'s key after it, as MORE_OF_KEY."""
    more = {**params, "key": first.key or KEYLESS, "priority": first.priority,
            "most": params["most"] - 1, "taken": [*params["taken"], first.pk]}  # fmt: skip
    if connection.vendor == "postgresql":
        return _fetch(MORE_OF_KEY, more)
    ready = _ready_generic(params["queue"], more["taken"])
    ready = ready.filter(key__isnull=True) if first.key is None else ready.filter(key=first.key)
    rows = ready.filter(priority=first.priority).order_by("available_at", "pk")
    return [Picked(*row) for row in rows.values_list(*_PICKED)[: more["most"]]]


_PICKED = ("pk", "key", "priority", "available_at")


def _ready_generic(queue: str, taken: list[int], full: Sequence[str] = ()) -> Any:
    ready = Task.objects.ready([queue]).exclude(pk__in=taken)
    return ready.exclude(key__in=full) if full else ready


def _fair_round_generic(params: dict[str, Any]) -> list[Picked]:
    """FAIR_ROUND with the ORM (SQLite: small queues; every key walked, asleep or not)."""
    queue, full, recent = params["queue"], params["full"], params["recent"]
    ready = _ready_generic(queue, params["taken"], full)
    top = ready.order_by("priority").values_list("priority", flat=True).first()
    if top is None:
        return []
    walk: list[str] = []
    if top != params["last"]:  # a round of the priority before walked them all
        keys = KeyState.objects.filter(queue=queue).exclude(key__in=[*full, *recent])
        walk = list(keys.order_by("served_at", "key").values_list("key", flat=True))
    found: list[Picked] = []
    for key in [*walk, *(k for k in recent if k not in full)]:
        of_key = ready.filter(key__isnull=True) if key == KEYLESS else ready.filter(key=key)
        row = of_key.filter(priority=top).order_by("available_at", "pk").values_list(*_PICKED)
        first = row.first()
        if first is not None:
            found.append(Picked(*first))
            if len(found) == params["most"]:
                break
    return found


def _in_order(params: dict[str, Any]) -> list[Picked]:
    if connection.vendor == "postgresql":
        return _fetch(IN_ORDER, params)
    ready = _ready_generic(params["queue"], params["taken"], params["full"])
    return [Picked(*row) for row in ready.claim_order().values_list(*_PICKED)[: params["most"]]]

"""Claims from queues with `fair` or `key_max_in_flight` (API.md "Keys"), decided under the
queue's settings row lock that broker.queue.restricted takes: one claim of such a queue at a time,
so what a pick reads (the keys' last hand-outs, their tasks in flight) is what it acts on.

- fair: among the claimable tasks of the highest priority present, the oldest task of the key
  whose last hand-out is longest ago (keyless tasks are the key ""; keys never served come first,
  oldest first: keys.unserved). A claim of n takes them round by round, as n single claims in a
  row would: one task of each key in that order, then a second of each, ...; the keys' `served_at`
  then moves on, in the order their tasks were taken. The keys are walked in `served_at` order
  (keystate_served_idx), each probed once on task_key_claim_idx: one key's backlog is one probe,
  never walked. A round that finds one key alone at the top priority (a queue whose tasks have no
  key: an SQS standard queue, fair from its CreateQueue) takes that key's next tasks in one more
  probe, as the rounds to come would one by one: a claim of n costs the same few statements
  whatever n is.
- key_max_in_flight: a key with that many tasks handed out is skipped until one of them ends;
  keyless tasks are not limited. Without `fair` the queue keeps claim order (priority, oldest),
  walking past the ready tasks of full keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from django.db import connection

from broker.models import KeyState, Task
from broker.queue.base import current_time
from broker.queue.keys import KEYLESS, UNSERVED_LEAD, unserved
from broker.queue.sql import CLAIMABLE

IN_FLIGHT = (
    "SELECT key, count(*) FROM broker_task WHERE queue = %(queue)s AND key IS NOT NULL"
    " AND state = 'handed_out' GROUP BY key"
)
# The highest priority present among the queue's claimable tasks not taken yet (one probe).
_TOP = (
    f"SELECT priority FROM broker_task WHERE {CLAIMABLE} AND queue >= %(queue)s"
    " AND queue <= %(queue)s AND id <> ALL(%(taken)s) ORDER BY queue, priority LIMIT 1"
)
FAIR_ROUND = (
    f"WITH top AS MATERIALIZED ({_TOP})"
    " SELECT c.id, k.key FROM (SELECT key FROM broker_keystate WHERE queue = %(queue)s"
    " AND key <> ALL(%(full)s) ORDER BY queue, served_at, key) AS k CROSS JOIN LATERAL ("
    "SELECT t.id FROM broker_task t WHERE t.state = 'ready' AND NOT t.key_wait"
    " AND t.queue = %(queue)s AND COALESCE(t.key, '') = k.key"
    " AND t.priority = (SELECT priority FROM top) AND t.id <> ALL(%(taken)s)"
    " ORDER BY t.available_at, t.id LIMIT 1) AS c LIMIT %(most)s"
)
IN_ORDER = (
    f"SELECT id, key FROM broker_task WHERE {CLAIMABLE} AND queue >= %(queue)s"
    " AND queue <= %(queue)s AND (key IS NULL OR key <> ALL(%(full)s))"
    " AND id <> ALL(%(taken)s) ORDER BY queue, priority, available_at, id LIMIT %(most)s"
)
# A fair round that found one key alone at the top priority: that key's next tasks at the same
# priority (the priority of the task the round took), in the order the rounds to come would take.
MORE_OF_KEY = (
    f"SELECT id, key FROM broker_task WHERE {CLAIMABLE} AND queue = %(queue)s"
    " AND COALESCE(key, '') = %(key)s"
    " AND priority = (SELECT priority FROM broker_task WHERE id = %(first)s)"
    " AND id <> ALL(%(taken)s) ORDER BY available_at, id LIMIT %(most)s"
)
# The keyless tasks' row, when missing: never served, appeared with its oldest claimable task (as
# keys do with their first task; keys.unserved). The probe runs only when the row is missing.
KEYLESS_ROW = (
    "INSERT INTO broker_keystate (queue, key, served_at) SELECT %(queue)s::varchar, '',"
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


def pick(queue: str, most: int, *, fair: bool, key_max: int | None) -> list[tuple[int, str | None]]:
    """(id, key) of up to `most` claimable tasks of `queue`, in the order to take them. Call
    under the queue's row lock, then hand them out; for a fair queue then call served()."""
    if most <= 0:
        return []
    held = in_flight(queue) if key_max is not None else Counter()
    room = {key: key_max - n for key, n in held.items()} if key_max is not None else {}
    taken: list[tuple[int, str | None]] = []
    if fair:
        _keyless_row(queue)
    while len(taken) < most:
        full = sorted(key for key, left in room.items() if left <= 0)
        params = {
            "queue": queue, "most": most - len(taken), "full": full,
            "taken": [pk for pk, _ in taken],
        }  # fmt: skip
        rows = _fair_round(params) if fair else _in_order(params)
        if not rows:
            break
        if fair and len(rows) == 1 and len(taken) < most - 1:
            # One key alone has claimable tasks at the top priority (most often the keyless
            # one): each round to come would take its next task, so take them in one probe.
            rows += _more_of_key(params, *rows[0])
        for pk, key in rows:
            if key_max is not None and key not in (None, KEYLESS):
                left = room.get(key, key_max)
                if left <= 0:
                    continue  # this round took the key's last slot already
                room[key] = left - 1
            taken.append((pk, key))
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


def _keyless_row(queue: str) -> None:
    """The keyless tasks' KeyState row, so a fair round walks them as a key of their own."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                KEYLESS_ROW, {"queue": queue, "now": current_time(), "lead": UNSERVED_LEAD}
            )
        return
    if KeyState.objects.filter(queue=queue, key=KEYLESS).exists():
        return
    oldest = (
        Task.objects.ready([queue]).filter(key__isnull=True).claim_order()
        .values_list("created_at", flat=True).first()
    )  # fmt: skip
    at = unserved(oldest or current_time())
    KeyState.objects.get_or_create(queue=queue, key=KEYLESS, defaults={"served_at": at})


def _fair_round(params: dict[str, Any]) -> list[tuple[int, str | None]]:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(FAIR_ROUND, params)
            return [(pk, key or None) for pk, key in cursor.fetchall()]
    return _fair_round_generic(params)


def _more_of_key(
    params: dict[str, Any], first: int, key: str | None
) -> list[tuple[int, str | None]]:
    """Up to params["most"] - 1 more tasks of `key` after `first`, as MORE_OF_KEY."""
    more = {**params, "key": key or KEYLESS, "first": first, "most": params["most"] - 1,
            "taken": [*params["taken"], first]}  # fmt: skip
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(MORE_OF_KEY, more)
            return [(pk, found or None) for pk, found in cursor.fetchall()]
    ready = Task.objects.ready([params["queue"]]).exclude(pk__in=more["taken"])
    ready = ready.filter(key__isnull=True) if key is None else ready.filter(key=key)
    priority = Task.objects.filter(pk=first).values_list("priority", flat=True)
    rows = ready.filter(priority__in=priority).order_by("available_at", "pk")
    return list(rows.values_list("pk", "key")[: more["most"]])


def _fair_round_generic(params: dict[str, Any]) -> list[tuple[int, str | None]]:
    """FAIR_ROUND with the ORM (SQLite: small queues)."""
    queue, taken, full = params["queue"], params["taken"], set(params["full"])
    ready = Task.objects.ready([queue]).exclude(pk__in=taken)
    top = ready.order_by("priority").values_list("priority", flat=True).first()
    if top is None:
        return []
    found: list[tuple[int, str | None]] = []
    for key in (
        KeyState.objects.filter(queue=queue).exclude(key__in=full)
        .order_by("served_at", "key").values_list("key", flat=True)
    ):  # fmt: skip
        of_key = ready.filter(key__isnull=True) if key == KEYLESS else ready.filter(key=key)
        pk = of_key.filter(priority=top).order_by("available_at", "pk").values_list(
            "pk", flat=True).first()  # fmt: skip
        if pk is not None:
            found.append((pk, key or None))
            if len(found) == params["most"]:
                break
    return found


def _in_order(params: dict[str, Any]) -> list[tuple[int, str | None]]:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(IN_ORDER, params)
            return list(cursor.fetchall())
    ready = Task.objects.ready([params["queue"]]).exclude(pk__in=params["taken"])
    ready = ready.exclude(key__in=params["full"])
    return list(ready.claim_order().values_list("pk", "key")[: params["most"]])

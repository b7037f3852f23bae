"""Queue settings: paused, max_in_flight, rate_per_s, fair, key_max_in_flight, ordered. Not task
state (broker.queue owns that, keys.unorder included):
the API, admin and tests change them only through update() here."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from broker.exceptions import BrokerError, InvalidFields
from broker.models import GAUGE_COLUMNS, Queue, QueueName
from broker.queue import counters, keys, restricted
from broker.queue import names as named
from broker.queue.base import current_time
from broker.wakeup import announce
from contract.limits import MAX_IN_FLIGHT, MAX_RATE_PER_S, QUEUE_MESSAGE, QUEUE_RE

FIELDS = ("paused", "max_in_flight", "rate_per_s", "fair", "key_max_in_flight", "ordered")
GAUGES = GAUGE_COLUMNS  # the gauges of /queues, in that order
# Parked claimers of a queue woken when its settings loosen: each looks once, those that find
# nothing park again.
WAKE_ON_CHANGE = 1000


class QueueNotFound(BrokerError):
    """No such queue: no task and no setting ever named it."""

    status_code = 404


def problems(changes: dict[str, Any]) -> dict[str, list[str]]:
    """What is wrong with a PATCH /queues/{name} body, by field (empty: nothing)."""
    found = {key: ["Unknown field."] for key in changes if key not in FIELDS}
    for flag in ("paused", "fair", "ordered"):
        if flag in changes and type(changes[flag]) is not bool:
            found[flag] = ["Must be true or false."]
    for cap in ("max_in_flight", "key_max_in_flight"):
        value = changes.get(cap)
        if value is not None and (type(value) is not int or not 1 <= value <= MAX_IN_FLIGHT):
            found[cap] = [f"Must be an integer from 1 to {MAX_IN_FLIGHT}, or null."]
    if "rate_per_s" in changes:
        value = changes["rate_per_s"]
        # The range alone refuses NaN and infinities; math.isfinite would overflow on an
        # integer too big for a float (1 followed by 400 zeros).
        if value is not None and (
            type(value) not in (int, float) or not 0 < value <= MAX_RATE_PER_S
        ):
            found["rate_per_s"] = [f"Must be a number above 0, at most {MAX_RATE_PER_S}, or null."]
    return found


def name_problems(name: str) -> dict[str, list[str]]:
    return {} if QUEUE_RE.fullmatch(name) else {"name": [QUEUE_MESSAGE]}


def names() -> list[str]:
    """Queues for people to pick from (the dashboard's history chart), by name: the
    SHOWN_QUEUES named last and the SHOWN_QUEUES holding the most tasks (every queue, while
    fewer were ever named)."""
    busiest = counters.stats(shown=counters.SHOWN_QUEUES)["queues"]
    return sorted({*named.newest(counters.SHOWN_QUEUES), *busiest})


def listed() -> QuerySet:
    """Every queue a task, a setting or SQS's CreateQueue ever named (QueueName rows; by id, the
    order first named), its list caught up first."""
    named.catch_up()
    return QueueName.objects.all()


def _shape(name: str, row: Queue | None, gauges: dict[str, int]) -> dict[str, Any]:
    return {
        "name": name,
        "paused": bool(row and row.paused),
        "max_in_flight": row.max_in_flight if row else None,
        "rate_per_s": row.rate_per_s if row else None,
        "fair": bool(row and row.fair),
        "key_max_in_flight": row.key_max_in_flight if row else None,
        "ordered": bool(row and row.ordered),
        **{g: gauges.get(g, 0) for g in GAUGES},
    }


def describe_many(names: list[str]) -> list[dict[str, Any]]:
    """These queues as API.md's <queue>, in this order; gauges from their counter rows (a page
    of GET /queues: two reads, whatever the page)."""
    rows = {row.name: row for row in Queue.objects.filter(name__in=names)}
    gauges = counters.queue_gauges(names)
    return [_shape(name, rows.get(name), gauges[name]) for name in names]


def describe(name: str) -> dict[str, Any]:
    """One queue as <queue>. Raises QueueNotFound for a name nothing ever used."""
    row = Queue.objects.filter(name=name).first()
    if row is None and not named.known(name):
        raise QueueNotFound()
    return _shape(name, row, counters.queue_gauges([name])[name])


def update(name: str, changes: dict[str, Any]) -> dict[str, Any]:
    """Change a queue's settings (creating them for a new name); returns <queue>.

    Raises ValueError naming the problems when `changes` or `name` is bad (see problems()). A
    change that lets more through wakes the queue's parked claimers on every process at commit.
    """
    bad = {**name_problems(name), **problems(changes)}
    if bad:
        raise SettingsError(bad)
    with transaction.atomic():
        named.add([name])
        # The row first (INSERT ... ON CONFLICT DO NOTHING), then its lock: clients that name a
        # new queue at once all insert, and the losers of the unique key would fail; this way
        # they wait for the first insert to commit, then each applies its change in turn.
        row = None
        for _ in range(5):  # deleted between the two (SQS's DeleteQueue committed): again
            ensure_rows([name])
            row = Queue.objects.select_for_update().filter(name=name).first()
            if row is not None:
                break
        else:
            raise RuntimeError(f"queue {name!r}: its settings row vanished five times")
        unordered = row.ordered and changes.get("ordered") is False
        ordering = not row.ordered and changes.get("ordered") is True
        loosened = _apply(row, changes)
        row.save()
        if unordered:
            keys.unorder(name)  # every task waiting for its key's turn: claimable now
        if ordering:
            keys.order(name)  # the tasks already there line up per key
        if loosened:
            announce({name: WAKE_ON_CHANGE})
    restricted.forget_hints()
    return describe(name)


def forget(name: str) -> None:
    """Back to the default settings (SQS's DeleteQueue): the queue's row goes, and what it held
    back is let go as update() would (ordered keys unordered, parked claimers woken). A queue
    no task named leaves the list of queues too."""
    with transaction.atomic():
        named.forget(name)
        row = Queue.objects.select_for_update().filter(name=name).first()
        if row is None:
            return
        if row.ordered:
            keys.unorder(name)
        row.delete()
        announce({name: WAKE_ON_CHANGE})
    restricted.forget_hints()


def update_many(names: list[str], changes: dict[str, Any]) -> int:
    """update() for many queues in one transaction (admin's pause and resume); returns how many."""
    with transaction.atomic():
        for name in sorted(names):  # one lock order
            update(name, changes)
    return len(names)


def ensure_rows(names: list[str]) -> None:
    """A settings row (no settings) for each of these queues."""
    Queue.objects.bulk_create([Queue(name=n) for n in names], ignore_conflicts=True)


def ensure_every_row() -> None:
    """A settings row for every queue ever named, so admin lists them all and can change any
    (a plain row costs a claim nothing: models.Queue's restricted index)."""
    missing = listed().exclude(name__in=Queue.objects.values("name"))
    ensure_rows(list(missing.values_list("name", flat=True)))


def _apply(row: Queue, changes: dict[str, Any]) -> bool:
    """Set `changes` on `row`; whether claims may now take more than before."""
    loosened = False
    for flag in ("paused", "fair", "ordered"):  # turned off: claims may take more
        if flag in changes:
            loosened |= getattr(row, flag) and not changes[flag]
            setattr(row, flag, changes[flag])
    for cap in ("max_in_flight", "key_max_in_flight"):  # raised or lifted: likewise
        if cap in changes:
            new, old = changes[cap], getattr(row, cap)
            loosened |= old is not None and (new is None or new > old)
            setattr(row, cap, new)
    if "rate_per_s" in changes:
        new_rate, old_rate = changes["rate_per_s"], row.rate_per_s
        at = current_time()
        if new_rate is None:
            row.tokens, row.refilled_at = 0.0, None
        elif old_rate is None:
            row.tokens, row.refilled_at = max(1.0, float(new_rate)), at  # a full bucket
        else:
            held = restricted.bucket(old_rate, row.tokens, row.refilled_at, at)
            row.tokens, row.refilled_at = min(held, max(1.0, float(new_rate))), at
        loosened |= old_rate is not None and (new_rate is None or new_rate > old_rate)
        row.rate_per_s = None if new_rate is None else float(new_rate)
    return loosened


class SettingsError(InvalidFields):
    """Bad queue settings; `fields` names each."""

"""The claim of queues whose settings hold it back: paused, `max_in_flight`, `rate_per_s`.

The one-statement claim (lease.py) takes nothing when a restricted queue is in its scope and says
so; the claim then comes here. In one transaction it locks the rows of the limited queues in its
scope (in name order, so two claims never deadlock), counts their tasks in flight in a new
statement (under READ COMMITTED one that sees every claim committed while it waited for the
locks), refills each token bucket by the database's clock, and claims at most what each allows,
from the other queues of its scope too unless they are restricted (read again in that statement).
A paused queue's row is never locked: the claim statement itself leaves paused queues out.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, Sum

from broker.models import RESTRICTED, Queue, QueueCounter, Task
from broker.queue import keyclaims, sizing, sql
from broker.queue.base import current_time, shard
from broker.wakeup import announce

# A scope found restricted is remembered for this long: its claims skip the one-statement try,
# which would only say "restricted" again. A hint, never trusted: the restricted path reads the
# settings itself, and a scope it finds unrestricted is forgotten at once.
HINT_S = 5.0
# Scopes remembered at most: past it the expired hints go, and if that is not enough, all of them
# (a hint only saves one statement), so claims of ever-new scopes cannot grow this process.
MAX_HINTS = 1024
# A float's floor, forgiving the rounding of a refill that lands on a whole token.
_EPSILON = 1e-9
_hints: dict[tuple[str, ...] | None, float] = {}


@dataclass(frozen=True, slots=True)
class Hand:
    """What one claim hands out under: its scope, how many, and the lease."""

    queues: list[str] | None
    limit: int
    lease_id: str
    deadline: datetime
    now: datetime
    worker: str | None

    def params(self) -> dict[str, Any]:
        return {
            "queues": self.queues, "limit": self.limit, "lease_id": self.lease_id,
            "deadline": self.deadline, "now": self.now, "worker": self.worker, "shard": shard(),
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Grant:
    """What a limited queue allows one claim now: `most` tasks; `tokens` in its bucket."""

    name: str
    most: int
    rate: float | None
    tokens: float | None  # refilled to now; None without a rate limit
    full: bool = False  # max_in_flight reached: a settle, not time, frees it

    def retry_in(self) -> float | None:
        """Seconds until the bucket holds a whole token again (None: it does, no rate, or the
        queue is full anyway)."""
        if self.rate is None or self.tokens is None or self.tokens >= 1 - _EPSILON or self.full:
            return None
        return (1 - self.tokens) / self.rate


def _key(queues: Sequence[str] | None) -> tuple[str, ...] | None:
    return tuple(sorted(queues)) if queues else None


def seems_restricted(queues: Sequence[str] | None) -> bool:
    """Whether this scope was found restricted a moment ago (a hint: see HINT_S)."""
    until = _hints.get(_key(queues))
    return until is not None and until > time.monotonic()


def _remember(queues: Sequence[str] | None, restricted: bool) -> None:
    key = _key(queues)
    if restricted:
        now = time.monotonic()
        if len(_hints) >= MAX_HINTS and key not in _hints:
            for old in [k for k, until in _hints.items() if until <= now]:
                del _hints[old]
            if len(_hints) >= MAX_HINTS:
                _hints.clear()
        _hints[key] = now + HINT_S
    else:
        _hints.pop(key, None)


def forget_hints() -> None:
    """Drop every hint (tests; and a settings change in this process)."""
    _hints.clear()


def unless_gated(
    queues: Sequence[str] | None, rows: list[tuple[Any, ...]]
) -> list[tuple[Any, ...]] | None:
    """The rows of a one-statement claim, or None when its marker row says it was gated."""
    if rows and any(row[0] is None for row in rows):
        _remember(queues, True)
        return None
    return rows


def bucket(rate: float, tokens: float, refilled_at: datetime | None, at: datetime) -> float:
    """The tokens a bucket of `rate` per second holds at `at` (capacity max(1, rate)).

    Over any T seconds a bucket spends at most rate * T + capacity tokens: API.md's bound.
    """
    capacity = max(1.0, rate)
    if refilled_at is None:
        return capacity
    elapsed = max(0.0, (at - refilled_at).total_seconds())
    return min(capacity, tokens + rate * elapsed)


def grant(row: tuple[Any, ...], in_flight: int, at: datetime, limit: int) -> Grant:
    """What a limited queue's settings row (name, max_in_flight, rate, tokens, refilled_at)
    allows a claim of up to `limit`, with `in_flight` of its tasks handed out."""
    name, max_in_flight, rate, tokens, refilled_at = row
    most = limit
    full = False
    if max_in_flight is not None:
        room = max(0, max_in_flight - in_flight)
        most, full = min(most, room), room == 0
    now_tokens = None
    if rate is not None:
        now_tokens = bucket(rate, tokens, refilled_at, at)
        most = min(most, math.floor(now_tokens + _EPSILON))
    return Grant(name, most, rate, now_tokens, full)


def claim(hand: Hand) -> tuple[list[tuple[Any, ...]], float | None]:
    """Claim for a scope with restricted queues: (rows as sql.CLAIM_COLUMNS, seconds until a
    rate limit's next token when that is what held the claim back, else None)."""
    if connection.vendor != "postgresql":
        return _claim_generic(hand)
    found, grants, skipped = _claim_pg(hand, wait=False)
    if not found and skipped:
        # Rows another claim held were passed over: wait for them once rather than answer
        # "nothing" while those queues may have room.
        found, grants, skipped = _claim_pg(hand, wait=True)
    return found, _retry_in(grants, found)


def _retry_in(grants: list[Grant], found: list[tuple[Any, ...]]) -> float | None:
    if found:
        return None
    waits = [w for g in grants if (w := g.retry_in()) is not None]
    return min(waits, default=None)


def _claim_pg(hand: Hand, *, wait: bool) -> tuple[list[tuple[Any, ...]], list[Grant], set[str]]:
    every = hand.queues is None
    with transaction.atomic(), connection.cursor() as cursor:
        statement = sql.RESTRICTED_IN_EVERY if every else sql.RESTRICTED_IN
        cursor.execute(statement, {"every": every, "scope": hand.queues or []})
        rows = cursor.fetchall()
        restricted = [(name, paused) for name, paused, _, sqs in rows if name and not sqs]
        # A queue SQS made holds the gate of a claim naming none: remembered as restricted too.
        _remember(hand.queues, rows[0][0] is not None)
        if not rows[0][2]:
            return [], [], set()  # nothing claimable in the scope: nothing to lock or pick
        limited = [name for name, paused in restricted if not paused]
        grants: list[Grant] = []
        keyed: dict[str, tuple[bool, int | None]] = {}
        skipped: set[str] = set()
        at = None
        if limited:
            cursor.execute(sql.LOCK_LIMITED + ("" if wait else " SKIP LOCKED"), {"names": limited})
            rows = cursor.fetchall()
            skipped = set(limited) - {row[0] for row in rows}
            keyed = {row[0]: (row[5], row[6]) for row in rows if row[5] or row[6] is not None}
            if rows:
                cursor.execute(sql.IN_FLIGHT, {"names": [row[0] for row in rows]})
                flights = cursor.fetchall()
                at = flights[0][0]
                in_flight = {name: int(n) for _, name, n in flights}
                grants = [grant(row[:5], in_flight[row[0]], at, hand.limit) for row in rows]

        allowed = [g for g in grants if g.most > 0 and g.name not in keyed]
        params = {
            **hand.params(), "scope": hand.queues,
            "names": [g.name for g in allowed], "lims": [g.most for g in allowed],
        }  # fmt: skip
        if keyed:
            found = _claim_keyed_pg(cursor, hand, grants, keyed, params)
        else:
            cursor.execute(sql.CLAIM_ALLOWED_EVERY if every else sql.CLAIM_ALLOWED, params)
            found = cursor.fetchall()
        _spend(cursor, grants, found, at)
        sizing.check(found)  # an answer past its size: rolled back, taken again for fewer
    return found, grants, skipped


# A task a claim may take, as a merge orders them: (priority, available_at, id, queue).
Candidate = tuple[int, datetime, int, str]


def _picks(
    hand: Hand, grants: list[Grant], keyed: dict[str, tuple[bool, int | None]]
) -> dict[str, list[keyclaims.Picked]]:
    """Each fair or key-capped queue's next tasks (their rows locked), as broker.queue.keyclaims
    picks them: at most what its grant allows, and at most the claim's limit."""
    picks = {}
    for g in grants:
        if g.name in keyed and g.most > 0:
            fair, key_max = keyed[g.name]
            picks[g.name] = keyclaims.pick(
                g.name, min(g.most, hand.limit), fair=fair, key_max=key_max
            )
    return picks


def merge(streams: Sequence[Sequence[Candidate]], limit: int) -> list[Candidate]:
    """A claim over several queues as `limit` single claims in a row: each takes the best of
    the queues' next tasks (priority, then oldest available_at, then id; API.md), each queue's
    own order (fair, limits) kept within it."""
    heads = [0] * len(streams)
    out: list[Candidate] = []
    while len(out) < limit:
        best = None
        for i, stream in enumerate(streams):
            if heads[i] < len(stream) and (
                best is None or stream[heads[i]] < streams[best][heads[best]]
            ):
                best = i
        if best is None:
            break
        out.append(streams[best][heads[best]])
        heads[best] += 1
    return out


def _keyed_streams(picks: dict[str, list[keyclaims.Picked]]) -> list[list[Candidate]]:
    return [[(p.priority, p.available_at, p.pk, name) for p in picked]
            for name, picked in picks.items()]  # fmt: skip


def _served(
    picks: dict[str, list[keyclaims.Picked]],
    keyed: dict[str, tuple[bool, int | None]],
    taken: set[int],
) -> None:
    """The keys of the fair queues' tasks taken, in the order each queue's pick took them."""
    for name, picked in picks.items():
        keys = [p.key for p in picked if p.pk in taken]
        if keyed[name][0] and keys:
            keyclaims.served(name, keys)


def _claim_keyed_pg(
    cursor: Any,
    hand: Hand,
    grants: list[Grant],
    keyed: dict[str, tuple[bool, int | None]],
    params: dict[str, Any],
) -> list[tuple[Any, ...]]:
    """Claim from a scope with fair or key-capped queues (their rows locked): their picks and
    the best of the other queues (locked, not handed out yet) merged in claim order, then the
    chosen handed out in one statement; the keys served move on."""
    picks = _picks(hand, grants, keyed)
    streams = _keyed_streams(picks)
    if hand.queues is None or set(hand.queues) - set(keyed):
        cursor.execute(sql.PICK_ALLOWED if hand.queues else sql.PICK_ALLOWED_EVERY, params)
        streams.append([(pr, at, pk, name) for pk, name, pr, at in cursor.fetchall()])
    chosen = merge(streams, hand.limit)
    if not chosen:
        return []
    order = {pk: i for i, (_, _, pk, _) in enumerate(chosen)}
    cursor.execute(sql.CLAIM_IDS, {**hand.params(), "ids": list(order)})
    found = sorted(cursor.fetchall(), key=lambda row: order[row[0]])  # as merged
    _served(picks, keyed, {row[0] for row in found})
    return found


def _spend(cursor: Any, grants: list[Grant], found: list[tuple[Any, ...]], at: Any) -> None:
    """Take the claimed tasks' tokens out of their buckets (refilled to `at`)."""
    taken = Counter(row[4] for row in found)
    spent = [g for g in grants if g.tokens is not None and taken[g.name]]
    if spent:
        cursor.execute(
            sql.SPEND_TOKENS,
            {"at": at, "names": [g.name for g in spent],
             "tokens": [g.tokens - taken[g.name] for g in spent]},  # type: ignore[operator]
        )  # fmt: skip


def _claim_generic(hand: Hand) -> tuple[list[tuple[Any, ...]], float | None]:
    """The restricted claim on SQLite, whose IMMEDIATE transaction already serializes claims."""
    from broker.queue.lease import hand_out_generic

    with transaction.atomic():
        scope = Queue.objects.filter(RESTRICTED)
        if hand.queues:
            scope = scope.filter(name__in=hand.queues)
        else:
            scope = scope.exclude(made_by_sqs=True)
        rows = list(
            scope.values_list(
                "name", "paused", "max_in_flight", "rate_per_s", "tokens", "refilled_at",
                "fair", "key_max_in_flight",
            )
        )  # fmt: skip
        _remember(hand.queues, bool(rows))
        at = current_time()
        limited = [row for row in rows if not row[1]]
        in_flight = dict(
            QueueCounter.objects.filter(queue__in=[row[0] for row in limited])
            .values("queue").annotate(n=Sum("handed_out")).values_list("queue", "n")
        )  # fmt: skip
        grants = [
            grant((n, m, r, t, at_), int(in_flight.get(n) or 0), at, hand.limit)
            for n, _, m, r, t, at_, _, _ in limited
        ]
        keyed = {row[0]: (row[6], row[7]) for row in limited if row[6] or row[7] is not None}

        picks = _picks(hand, grants, keyed)
        streams = _keyed_streams(picks)
        others = [g for g in grants if g.name not in keyed]
        plain = {
            row[0]: row for row in _pick_generic(hand, [row[0] for row in rows], others, hand.limit)
        }
        streams.append([(row[5], row[8], pk, row[4]) for pk, row in plain.items()])
        chosen = [pk for _, _, pk, _ in merge(streams, hand.limit)]
        of_keyed = Task.objects.filter(pk__in=[pk for pk in chosen if pk not in plain])
        plain.update((row[0], row) for row in of_keyed.values_list(*sql.CLAIM_COLUMNS))
        claimed = hand_out_generic(hand, [plain[pk] for pk in chosen])
        _served(picks, keyed, set(chosen))
        taken = Counter(row[4] for row in claimed)
        for g in grants:
            if g.tokens is not None and taken[g.name]:
                Queue.objects.filter(name=g.name).update(
                    tokens=g.tokens - taken[g.name], refilled_at=at
                )
        sizing.check(claimed)  # as _claim_pg's
    return claimed, _retry_in(grants, claimed)


def _pick_generic(
    hand: Hand, restricted: list[str], grants: list[Grant], limit: int
) -> list[tuple[Any, ...]]:
    """The ready rows to claim: the best of the unrestricted queues, and of each limited one
    at most its grant. (SQLite walks a paused queue's ready rows: it serves small queues.)"""
    if limit <= 0:
        return []
    columns = sql.CLAIM_COLUMNS
    ready = Task.objects.ready(hand.queues).exclude(queue__in=restricted)
    if not hand.queues:
        ready = ready.exclude(queue__in=Queue.objects.filter(made_by_sqs=True).values("name"))
    found = list(ready.claim_order().values_list(*columns)[:limit])
    for g in grants:
        if g.most > 0:
            found += Task.objects.ready([g.name]).claim_order().values_list(*columns)[: g.most]
    found.sort(key=lambda row: (row[5], row[8], row[0]))
    return found[:limit]


def wake_freed(freed: dict[str, int]) -> None:
    """Wake parked claimers of the queues among `freed` (queue → tasks that left handed_out)
    that cap their tasks in flight: a slot opened. Inside the move's transaction.

    SQL's settle does this in its own statement; SQLite's poll wakes claimers of any queue with
    ready tasks every BROKER_SQLITE_POLL_MS anyway.
    """
    if not freed or connection.vendor != "postgresql":
        return
    capped = Queue.objects.filter(
        Q(max_in_flight__isnull=False) | Q(key_max_in_flight__isnull=False),
        name__in=list(freed),
        paused=False,
    )
    announce({name: freed[name] for name in capped.values_list("name", flat=True)})

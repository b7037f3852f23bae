"""Failed attempts that no worker nacked: expired leases (the sweeper) and released ones (SQS's
ChangeMessageVisibility to 0): handed_out → delayed (backoff), → ready at once, or → dead."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from broker import observe
from broker.exceptions import LeaseMismatch, TaskNotHeld
from broker.models import Task, TaskError
from broker.queue import counters, dependencies
from broker.queue.base import (
    MAX_KEPT_ERRORS,
    Outcome,
    current_time,
    retries_left,
    retry_delay,
    storable,
)
from broker.queue.counters import Move
from broker.queue.deadletters import trim_errors
from broker.queue.settling import write_settled
from broker.states import TRANSITIONS, State
from broker.wakeup import announce

RELEASED = "released: visibility timeout set to 0"
_EVENTS = ("reclaim_retry", "reclaim_bury", "release")
_HANDED_OUT = State.HANDED_OUT.value
_RETRY, _BURY, _AT_ONCE = (TRANSITIONS[e][1] for e in _EVENTS)
# (id, queue, attempts, max_attempts, backoff, children) of a handed-out task, locked by the
# caller; children: how many tasks named it in `after`.
Held = tuple[int, str, int, int | None, bool, int]
HELD_COLUMNS = ("pk", "queue", "attempts", "max_attempts", "backoff", "children")


def fail_held(rows: Sequence[Held], now: datetime, error: str, *, at_once: bool) -> list[Move]:
    """Record a failed attempt of each row (locked, handed out): → dead when out of attempts,
    else → ready at once (`at_once`, or a task without backoff, waking its queue's claimers),
    else → delayed for its backoff. Call inside the transaction that locked them."""
    updates, errors = [], []
    moves: list[Move] = []
    ready: Counter[str] = Counter()
    for pk, queue, attempts, max_attempts, backoff, _ in rows:
        if not retries_left(attempts, max_attempts):
            state, available_at = _BURY, None
        elif at_once or not backoff:
            state, available_at = _AT_ONCE, now
            ready[queue] += 1
        else:
            state, available_at = _RETRY, now + retry_delay(attempts)
        updates.append((state, available_at, error, None, pk))
        moves.append((queue, _HANDED_OUT, state))
        errors.append(TaskError(task_id=pk, attempt=attempts, at=now, error=error))
    # The lapsed lease stays, buried or not: SQS's DeleteMessage with its receipt handle still
    # deletes the message (ack_lapsed) until it is received again; a requeue drops it.
    write_settled(updates, now, keep_lease=True)
    TaskError.objects.bulk_create(errors)
    waited_for = {row[0] for row in rows if row[5]}
    buried = {u[4]: _BURY for u in updates if u[0] == _BURY and u[4] in waited_for}
    if buried:
        dependencies.after_finish(buried, now)  # a "finished" wait is over for a dead task
    # The counter rows after every task lock (dependencies: lock order).
    counters.bump(counters.count_moves(_EVENTS, moves))
    # Unlimited attempts would otherwise grow a task's error history without bound.
    long_lived = [r[0] for r in rows if r[3] is None and r[2] > MAX_KEPT_ERRORS]
    if long_lived:
        trim_errors(long_lived)
    announce(ready)
    return moves


def release_many(items: Sequence[tuple[int | None, str]]) -> list[Outcome]:
    """Hand back held tasks at once, each (id, lease id): handed_out → ready (waking claimers),
    or → dead when out of attempts; the error history records the release.

    Each item's outcome is as for ack: None, TaskNotHeld (404) or LeaseMismatch (409).
    """
    now = current_time()
    wanted = [(pk, storable(lease)) for pk, lease in items]
    outcomes: list[Outcome] = []
    with transaction.atomic():
        held = {
            row[0]: row
            for row in Task.objects.select_for_update()
            .filter(pk__in=sorted({pk for pk, _ in wanted if pk is not None}), state=_HANDED_OUT)
            .order_by("pk")
            .values_list(*HELD_COLUMNS, "lease_id")
        }
        rows: dict[int, Held] = {}
        for pk, lease_id in wanted:
            row = held.get(pk) if pk is not None else None
            if row is None or (row[6] == lease_id and pk in rows):
                outcomes.append(TaskNotHeld)
            elif row[6] != lease_id:
                outcomes.append(LeaseMismatch)
            else:
                rows[row[0]] = row[:6]
                outcomes.append(None)
        moves = fail_held(list(rows.values()), now, RELEASED, at_once=True) if rows else []
    _log(moves, list(rows))
    return outcomes


def ack_lapsed(items: Sequence[tuple[int | None, str]]) -> list[bool]:
    """Ack tasks whose latest lease, the one named, failed (lapsed, or released) and that no
    claim has taken since: ready, delayed or (out of attempts) dead → done. Per item, whether
    it moved; one transaction."""
    target = TRANSITIONS["ack_lapsed"][1]
    wanted = {(pk, storable(lease)) for pk, lease in items if pk is not None}
    if not wanted:
        return [False] * len(items)
    now = current_time()
    with transaction.atomic():
        rows = list(
            Task.objects.select_for_update()
            .filter(pk__in=sorted(pk for pk, _ in wanted), state__in=TRANSITIONS["ack_lapsed"][0])
            .order_by("pk")
            .values_list("pk", "lease_id", "queue", "state")
        )
        moving = [row for row in rows if (row[0], row[1]) in wanted]
        if moving:
            Task.objects.filter(pk__in=[row[0] for row in moving]).update(
                state=target, lease_id=None, updated_at=now
            )
            moves: list[Move] = [(queue, state, target) for _, _, queue, state in moving]
            dependencies.after_finish({row[0]: target for row in moving}, now)
            counters.bump(counters.count_moves(("ack_lapsed",), moves))  # after every task lock
    moved = {row[0] for row in moving}
    for pk, _, queue, state in moving:
        observe.moved(state, target, task=pk, queue=queue)
    return [pk in moved for pk, _ in items]


def release(task_id: int, *, lease_id: str) -> None:
    """release_many for one task. Raises TaskNotHeld (404) or LeaseMismatch (409)."""
    (outcome,) = release_many([(task_id, lease_id)])
    if outcome is not None:
        raise outcome()


def _log(moves: list[Move], task_ids: list[int]) -> None:
    if len(moves) == 1:
        queue, old, new = moves[0]
        observe.moved(old or "", new, task=task_ids[0], queue=queue)
    else:
        for state, n in Counter(new for _, _, new in moves).items():
            observe.moved(_HANDED_OUT, state, count=n)


def limit_receives(queue_name: str, max_attempts: int | None) -> int:
    """Give the queue's live tasks without backoff (its SQS messages) a new max_attempts (None:
    unlimited), as SQS applies a changed RedrivePolicy to the messages already in the queue.
    Returns how many changed; no state moves (a task over the limit is buried at its next
    failure)."""
    live = (State.READY, State.DELAYED, State.HANDED_OUT)
    changed: int = Task.objects.filter(queue=queue_name, state__in=live, backoff=False).update(
        max_attempts=max_attempts
    )
    return changed

"""Settles written row by row: SQLite's settle (the same answers and moves as sql.SETTLE), and
the settled rows' write that the reclaims share (broker.queue.redelivery)."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import connection, transaction

from broker import observe
from broker.exceptions import LeaseMismatch, TaskNotHeld
from broker.models import Task, TaskError
from broker.queue import counters, dependencies
from broker.queue.base import (
    MAX_KEPT_ERRORS,
    Outcome,
    Settle,
    aware,
    retries_left,
    retry_delay,
)
from broker.queue.deadletters import trim_errors
from broker.states import TRANSITIONS, State

_HANDED_OUT = TRANSITIONS["claim"][1]
_SETTLE_EVENTS = ("ack", "nack_retry", "nack_bury")


class Settled(NamedTuple):
    """One settle item's answer, and what the move's log line needs when it moved."""

    error: Outcome
    queue: str | None = None
    attempts: int | None = None
    state: str | None = None


def settle_generic(acks: list[Settle], nacks: list[Settle], now: datetime) -> list[Settled]:
    """settle() as ORM statements (SQLite): the same answers and moves as sql.SETTLE."""
    items = [(*a, True) for a in acks] + [(*n, False) for n in nacks]
    answers: list[Settled] = []
    with transaction.atomic():
        ids = sorted({pk for pk, *_ in items if pk is not None})
        held = {
            row[0]: row
            for row in Task.objects.select_for_update()
            .filter(pk__in=ids, state=_HANDED_OUT)
            .order_by("pk")
            .values_list(
                "pk",
                "lease_id",
                "attempts",
                "max_attempts",
                "queue",
                "claimed_at",
                "backoff",
                "children",
            )
        }
        done: set[int] = set()
        updates, errors, moves = [], [], []
        histogram: dict[str, Counter[str]] = defaultdict(Counter)
        for pk, lease_id, body, is_ack in items:
            if pk is None or (row := held.get(pk)) is None:
                answers.append(Settled(TaskNotHeld))
                continue
            if row[1] != lease_id:
                answers.append(Settled(LeaseMismatch))
                continue
            if pk in done:
                answers.append(Settled(TaskNotHeld))
                continue
            done.add(pk)
            _, _, attempts, max_attempts, queue, claimed_at, backoff, _ = row
            if is_ack:
                state, available_at = State.DONE.value, None
            elif retries_left(attempts, max_attempts):
                wait = retry_delay(attempts) if backoff else timedelta(0)
                state, available_at = State.DELAYED.value, now + wait
            else:
                state, available_at = State.DEAD.value, None
            updates.append(
                (state, available_at, None if is_ack else body, body if is_ack else None, pk)
            )
            if not is_ack:
                errors.append(TaskError(task_id=pk, attempt=attempts, at=now, error=body))
            moves.append((queue, _HANDED_OUT, state))
            histogram[queue].update(observe.duration_deltas(aware(claimed_at), now))
            answers.append(Settled(None, queue, attempts, state))
        if updates:
            write_settled(updates, now)
            TaskError.objects.bulk_create(errors)
            # As sql.SETTLE releases dependants: of the tasks some other task named in `after`.
            finished = {u[4]: u[0] for u in updates if u[0] != State.DELAYED and held[u[4]][7]}
            if finished:
                dependencies.after_finish(finished, now)
            endless = [
                pk
                for pk, *_ in nacks
                if pk in done and held[pk][3] is None and held[pk][2] > MAX_KEPT_ERRORS
            ]
            if endless:
                trim_errors(endless)  # as sql.SETTLE does: no DLQ requeue will ever trim them
            deltas = counters.count_moves(_SETTLE_EVENTS, moves)
            for queue, change in histogram.items():
                deltas[queue].update(change)
            counters.bump(deltas)
    return answers


SETTLE_UPDATE = (
    'UPDATE "broker_task" SET "state" = %s, "available_at" = COALESCE(%s, "available_at"), '
    '"last_error" = COALESCE(%s, "last_error"), "result" = COALESCE(%s, "result"), '
    '"lease_id" = {lease}, "lease_deadline" = NULL, "worker" = NULL, "updated_at" = %s '
    'WHERE "id" = %s'
)


def write_settled(
    updates: list[tuple[Any, ...]], now: datetime, *, keep_lease: bool = False
) -> None:
    """Write settled rows (state, available_at, error, result, id). keep_lease: the task keeps
    the id of the lease that just failed, as SQS keeps a receipt handle good until the message
    is received again (see ack_lapsed); settle and extend accept a lease only of a task handed
    out, and a claim writes a new one."""
    if not updates:
        return
    ops = connection.ops
    at = ops.adapt_datetimefield_value(now)
    params = [
        (
            state,
            ops.adapt_datetimefield_value(available) if available else None,
            error,
            result,
            at,
            pk,
        )
        for state, available, error, result, pk in updates
    ]
    statement = SETTLE_UPDATE.format(lease='"lease_id"' if keep_lease else "NULL")
    with connection.cursor() as cursor:
        cursor.executemany(statement, params)

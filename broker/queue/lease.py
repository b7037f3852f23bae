"""Leases: claim (ready → handed_out), settle (ack → done, nack → delayed or dead), extend."""

from __future__ import annotations

import dataclasses
import json
import random
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from django.db import connection, transaction
from django.db.models import F

from broker import observe
from broker.exceptions import BrokerError, LeaseMismatch, TaskNotHeld
from broker.models import Queue, Task
from broker.queue import counters, dependencies, keys, restricted, sizing, sql
from broker.queue.base import (
    ClaimedTask,
    Delivery,
    Outcome,
    QueuePatterns,
    Settle,
    api_time,
    aware,
    current_time,
    kept_error,
    shard,
    storable,
)
from broker.queue.settling import Settled, settle_generic
from broker.states import TRANSITIONS, State
from contract.conf import broker_settings

_HANDED_OUT = TRANSITIONS["claim"][1]
_OUTCOMES: tuple[Outcome, ...] = (None, TaskNotHeld, LeaseMismatch)  # sql.SETTLE's codes
# sql.SETTLE: held under the item's lease, not moved (not safe in one statement, see
# sqlrelease.in_one_statement): settle it again, locking first (_in_lock_order).
_AGAIN = 3


# -- claim ------------------------------------------------------------------------------------


class Claimed(list[Delivery]):
    """A claim's deliveries; `retry_in`: when it found nothing because of a rate limit, in how
    many seconds the next token comes (a parked claim looks again then: no wake-up says so)."""

    retry_in: float | None = None


def claim(
    queues: list[str] | QueuePatterns | None,
    lease_ms: int,
    limit: int = 1,
    worker: str | None = None,
) -> Claimed:
    """Hand out up to `limit` ready tasks, priority then oldest first: ready → handed_out.

    Nothing from a paused queue; from a limited one, no more than its settings allow (see
    broker.queue.restricted). Of several, none past the one that takes the answer past
    MAX_ANSWER_BYTES (broker.queue.sizing): those are not handed out. On PostgreSQL, SKIP LOCKED
    lets concurrent claimers pass each other's rows instead of waiting; on SQLite the IMMEDIATE
    transaction holds the write lock from BEGIN. QueuePatterns (an access token's claim that
    names no queue): on PostgreSQL one statement takes from the queues with ready tasks that
    match; when a restricted queue matches, or on SQLite, those queues are found first.
    """
    patterns = queues if isinstance(queues, QueuePatterns) else None
    scope = None if isinstance(queues, QueuePatterns) else queues
    if patterns is not None and connection.vendor != "postgresql":
        scope, patterns = _matching(patterns), None
        if not scope:
            return Claimed()
    now = current_time()
    lease_id = uuid.uuid4().hex
    deadline = now + timedelta(milliseconds=lease_ms)
    hand = restricted.Hand(scope, limit, lease_id, deadline, now, worker)
    found: list[tuple[Any, ...]] | None = None
    retry_in = None
    if patterns is not None:
        found = _claim_pg_matching(hand, patterns)
        if found is None:  # a restricted queue matches: the restricted path, on their names
            names = _matching(patterns)
            if not names:
                return Claimed()
            hand = dataclasses.replace(hand, queues=names)
    elif not restricted.seems_restricted(scope):
        # One statement that also says whether a restricted queue is in its scope.
        if connection.vendor == "postgresql":
            found = _claim_pg(hand)
        else:
            found = _claim_generic(hand)
    if found is None:
        found, retry_in = _claim_restricted(hand)
    tasks = [ClaimedTask(*row) for row in found]
    waited = [task.pk for task in tasks if task.after_policy is not None]
    parents = dependencies.parents_of(waited) if waited else {}
    if len(tasks) == 1:
        first = tasks[0]
        observe.moved(
            State.READY, _HANDED_OUT, task=first.pk, queue=first.queue, attempts=first.attempts
        )
    elif tasks:
        observe.moved(State.READY, _HANDED_OUT, count=len(tasks))
    claimed = Claimed(
        Delivery(task, lease_id, deadline, tuple(parents.get(task.pk, ()))) for task in tasks
    )
    claimed.retry_in = retry_in
    return claimed


def _claim_pg_matching(
    hand: restricted.Hand, patterns: QueuePatterns
) -> list[tuple[Any, ...]] | None:
    """The claim of the queues matching `patterns` as one statement; None when a restricted
    queue matches."""
    statement = sql.CLAIM_MATCHING_MANY if hand.limit > 1 else sql.CLAIM_MATCHING
    with connection.cursor() as cursor:
        cursor.execute(statement, {**hand.params(), "regexes": list(patterns.regexes)})
        rows = cursor.fetchall()
    if any(row[0] is None for row in rows):
        return None
    return rows


def _matching(patterns: QueuePatterns) -> list[str]:
    """The queues with claimable tasks whose names match `patterns`, but those SQS's CreateQueue
    made (a claim naming no queue leaves them alone)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(sql.READY_QUEUES_MATCHING, {"regexes": list(patterns.regexes)})
            return [row[0] for row in cursor.fetchall()]
    ready = Task.objects.filter(state=State.READY, key_wait=False)
    ready = ready.exclude(queue__in=Queue.objects.filter(made_by_sqs=True).values("name"))
    names = ready.values_list("queue", flat=True)
    return sorted(q for q in set(names) if any(fnmatchcase(q, g) for g in patterns.globs))


def _claim_restricted(hand: restricted.Hand) -> tuple[list[tuple[Any, ...]], float | None]:
    """restricted.claim; taken again for fewer tasks (its transaction rolled back, nothing
    handed out) when its answer would pass MAX_ANSWER_BYTES."""
    while True:
        try:
            return restricted.claim(hand)
        except sizing.Oversize as over:
            hand = dataclasses.replace(hand, limit=over.keep)


def _claim_pg(hand: restricted.Hand) -> list[tuple[Any, ...]] | None:
    """The claim as one statement; None when a restricted queue is in its scope."""
    queues, many = hand.queues, hand.limit > 1
    if not queues:
        statement = sql.CLAIM_ANY_MANY if many else sql.CLAIM_ANY
    elif len(queues) == 1:
        statement = sql.CLAIM_ONE_QUEUE_MANY if many else sql.CLAIM_ONE_QUEUE
    else:
        statement = sql.CLAIM_QUEUES_MANY if many else sql.CLAIM_QUEUES
    params = {**hand.params(), "queue": queues[0] if queues else None}
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    return restricted.unless_gated(hand.queues, rows)


def _claim_generic(hand: restricted.Hand) -> list[tuple[Any, ...]] | None:
    """The claim on SQLite: the read of ready tasks also says whether a restricted queue is
    in its scope (so the query count stays); None when one is."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(*sql.sqlite_gated_pick(hand.queues, hand.limit))
            found = restricted.unless_gated(hand.queues, cursor.fetchall())
        if found is None:
            return None
        return hand_out_generic(hand, found[: sizing.fitting(found)])


def hand_out_generic(hand: restricted.Hand, found: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Hand out the ready rows `found` (CLAIM_COLUMNS, in claim order) with their counters: the
    ORM half of a claim; call inside the claim's transaction."""
    if not found:
        return []
    Task.objects.filter(pk__in=[row[0] for row in found]).update(
        state=_HANDED_OUT,
        attempts=F("attempts") + 1,
        lease_id=hand.lease_id,
        lease_deadline=hand.deadline,
        claimed_at=hand.now,
        worker=hand.worker,
        updated_at=hand.now,
    )
    moves = [(row[4], State.READY.value, _HANDED_OUT) for row in found]
    counters.bump(counters.count_moves(("claim",), moves))
    return [
        (
            *row[:2],
            row[2] + 1,
            *row[3:7],
            api_time(aware(row[7])),
            api_time(aware(row[8])),
            *row[9:],
        )
        for row in found
    ]


# -- settle -----------------------------------------------------------------------------------


def settle(acks: Sequence[Settle], nacks: Sequence[Settle]) -> list[Settled]:
    """Ack and nack many tasks in one transaction: handed_out → done, or → delayed (backoff)
    while attempts are left, else → dead, keeping each nack's error.

    Answers acks then nacks, in order, each as its single call would: settled, TaskNotHeld (not
    handed out, or settled by an earlier item) or LeaseMismatch (handed out under another lease).
    """
    if not acks and not nacks:
        return []
    now = current_time()
    acks = [(pk, storable(lease), None if r is None else json.dumps(r)) for pk, lease, r in acks]
    nacks = [(pk, storable(lease), kept_error(e)) for pk, lease, e in nacks]
    if connection.vendor == "postgresql":
        if len(acks) == 1 and not nacks:
            answers = [_ack_one_pg(*acks[0], now)]
        else:
            answers = _settle_pg(acks, nacks, now)
    else:
        answers = settle_generic(acks, nacks, now)
    if len(answers) == 1:
        (one,) = answers
        if one.error is None:
            pk = (acks or nacks)[0][0]
            observe.moved(
                _HANDED_OUT, one.state or "", task=pk, queue=one.queue, attempts=one.attempts
            )
    else:
        for state, n in Counter(a.state for a in answers if a.error is None).items():
            observe.moved(_HANDED_OUT, state or "", count=n)
    return answers


def _ack_one_pg(pk: int | None, lease_id: str, body: str | None, now: datetime) -> Settled:
    if pk is None:
        return Settled(TaskNotHeld)
    params = {"id": pk, "lease_id": lease_id, "body": body, "now": now, "shard": shard()}
    with connection.cursor() as cursor:
        cursor.execute(sql.ACK_ONE, {**params, "locked": False})
        row = cursor.fetchone()
        found = None if row is not None else _holder(cursor, pk)
        if found == (_HANDED_OUT, lease_id):
            # Not safe in one statement (sqlrelease.in_one_statement): once more, locking
            # first. It moves the task, whatever is enqueued after it meanwhile.
            rows = _in_lock_order([pk], sql.ACK_ONE, params)
            row = rows[0] if rows else None
            found = None if row is not None else _holder(cursor, pk)
            if found == (_HANDED_OUT, lease_id):  # waiting for its key's turn
                (answer,) = _settle_in_line([(pk, lease_id, body)], [], now)
                return answer
    if row is None:
        held = found is not None and found[0] == _HANDED_OUT and found[1] != lease_id
        return Settled(LeaseMismatch if held else TaskNotHeld)
    if row[3]:
        observe.moved(State.BLOCKED, "ready|delayed", count=row[3])
    return Settled(None, row[0], row[1], State.DONE.value)


def _holder(cursor: Any, pk: int) -> tuple[str, str | None] | None:
    """The task's (state, lease_id) now; None when there is no such task."""
    cursor.execute("SELECT state, lease_id FROM broker_task WHERE id = %s", [pk])
    found: tuple[str, str | None] | None = cursor.fetchone()
    return found


def _in_lock_order(ids: list[int], statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Run a settle `statement` in a transaction that first takes its locks in id order: its
    tasks and every task waiting for one of them (sql.LOCK_SETTLED), so that no enqueue can name
    them meanwhile and nothing is locked out of order. Its rows."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql.LOCK_SETTLED, {"ids": sorted(set(ids))})
        cursor.execute(statement, {**params, "locked": True})
        return cursor.fetchall()


def _settle_pg(
    acks: list[Settle], nacks: list[Settle], now: datetime, *, locked: bool = False
) -> list[Settled]:
    """sql.SETTLE: in one statement; the items it could not settle so (_AGAIN), once more in
    lock order (locked: this is that run)."""
    ids = [a[0] for a in acks] + [n[0] for n in nacks]
    params = {
        "acks": len(acks),
        "ack_ids": [a[0] for a in acks],
        "ack_leases": [a[1] for a in acks],
        "ack_bodies": [a[2] for a in acks],
        "nack_ids": [n[0] for n in nacks],
        "nack_leases": [n[1] for n in nacks],
        "nack_bodies": [n[2] for n in nacks],
        "nack_jitter": [random.random() for _ in nacks],  # noqa: S311 -- backoff jitter
        "now": now,
        "shard": shard(),
        "retry_base_ms": broker_settings.BROKER_RETRY_BASE_MS,
        "retry_max_ms": broker_settings.BROKER_RETRY_MAX_MS,
        "top": max((pk for pk in ids if pk is not None), default=0),
    }
    statement = sql.SETTLE if acks and nacks else sql.SETTLE_ACKS if acks else sql.SETTLE_NACKS
    if locked:
        rows = _in_lock_order([pk for pk in ids if pk is not None], statement, params)
    else:
        with connection.cursor() as cursor:
            cursor.execute(statement, {**params, "locked": False})
            rows = cursor.fetchall()
    if rows and rows[0][6]:
        observe.moved(State.BLOCKED, "ready|delayed", count=rows[0][6])
    answers = [
        Settled(_OUTCOMES[min(code, 1) if code == _AGAIN else code], queue, attempts, state)
        for _, code, queue, attempts, state, _, _ in rows
    ]
    again = [i for i, row in enumerate(rows) if row[1] == _AGAIN]
    if again:
        acks_again = [acks[i] for i in again if i < len(acks)]
        nacks_again = [nacks[i - len(acks)] for i in again if i >= len(acks)]
        if locked:  # still held: waiting for its key's turn (sqlrelease.in_one_statement)
            retried = _settle_in_line(acks_again, nacks_again, now)
        else:
            retried = _settle_pg(acks_again, nacks_again, now, locked=True)
        for i, answer in zip(again, retried, strict=True):
            answers[i] = answer
    return answers


def _settle_in_line(acks: list[Settle], nacks: list[Settle], now: datetime) -> list[Settled]:
    """Settle tasks handed out while waiting for their key's turn (keys.order) as SQLite does,
    whose release hands an ended task's place in line over (dependencies._hand_over_turns).
    Locks first as an enqueue of their keys does, their keys' rows, then, in id order, every
    task the hand-over may move (dependencies.lock_for_cancel): nothing is locked out of order."""
    ids = sorted({pk for pk, _, _ in [*acks, *nacks] if pk is not None})
    with transaction.atomic():
        pairs = Task.objects.filter(pk__in=ids, key__isnull=False).values_list("queue", "key")
        keys.hold(list(pairs))
        dependencies.lock_for_cancel(ids)
        return settle_generic(acks, nacks, now)


def ack_many(items: Sequence[Settle]) -> list[Outcome]:
    """Ack many tasks in one transaction; each item's outcome is its single ack's."""
    return [answer.error for answer in settle(items, [])]


def nack_many(items: Sequence[Settle]) -> list[Outcome]:
    """Nack many tasks in one transaction; each item's outcome is its single nack's."""
    return [answer.error for answer in settle([], items)]


def ack(task_id: int, *, lease_id: str, result: Any = None) -> None:
    """handed_out → done, keeping `result`.

    Raises TaskNotHeld (404) unless the task is handed out; LeaseMismatch (409) if under
    another lease.
    """
    (answer,) = settle([(task_id, lease_id, result)], [])
    if answer.error is not None:
        raise answer.error()


def nack(task_id: int, *, lease_id: str, error: str | None = None) -> State:
    """handed_out → delayed (backoff) while attempts are left, else → dead; keeps the error.

    Returns the new state. Raises TaskNotHeld (404) or LeaseMismatch (409) as ack does.
    """
    (answer,) = settle([], [(task_id, lease_id, error)])
    if answer.error is not None:
        raise answer.error()
    # Settled leaves state None only beside an error; mypy cannot tie the two fields together.
    return State(answer.state)  # type: ignore[arg-type]


def extend(task_id: int, *, lease_id: str, lease_ms: int) -> datetime:
    """Move a held lease's deadline to now + lease_ms; no state change. Raises as ack does."""
    deadline = current_time() + timedelta(milliseconds=lease_ms)
    lease_id = storable(lease_id)
    moved = Task.objects.filter(pk=task_id, state=_HANDED_OUT, lease_id=lease_id).update(
        lease_deadline=deadline
    )
    if not moved:
        raise not_held(task_id)
    return deadline


def not_held(task_id: int) -> BrokerError:
    """Why a move under a lease matched no row: 409 while another lease holds the task, else 404."""
    state = Task.objects.filter(pk=task_id).values_list("state", flat=True).first()
    return LeaseMismatch() if state == _HANDED_OUT else TaskNotHeld()

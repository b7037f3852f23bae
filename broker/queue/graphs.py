"""Whole graphs of tasks (broker/workflows): enqueue every step and its dependency rows in one
transaction, all or nothing; cancel every step left in one transaction."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction

from broker import observe
from broker.exceptions import InvalidTaskError, UniqueKeyHeld
from broker.models import Dependency, Task, Workflow
from broker.queue import counters, events, keys, unique
from broker.queue.base import NewTask, current_time
from broker.queue.deadletters import cancel_many
from broker.queue.dependencies import FINISHED
from broker.queue.enqueue import _EVENTS
from broker.queue.newrows import new_row
from broker.states import TRANSITIONS, State
from broker.wakeup import announce

_BLOCKED = TRANSITIONS["enqueue_blocked"][1]
_LIVE = TRANSITIONS["cancel"][0]


def enqueue_graph(
    name: str, steps: Sequence[tuple[str, NewTask, tuple[str, ...], str]]
) -> tuple[int, dict[str, int]]:
    """Store a workflow and its steps (ref, task, refs it waits for, policy), which name refs of
    this graph only and draw no cycle (broker/workflows checks both). A step waiting for others
    starts blocked; the rest start ready or delayed. Returns (workflow id, {ref: task id}).

    Raises InvalidTaskError naming `steps.N.job.idempotency_key` when a step's key is kept;
    UniqueKeyHeld (409) naming `steps.N.job.unique` when a step's unique key has a holder (a
    stored task, or an earlier step).
    """
    idem = {s[1].idempotency_key: i for i, s in enumerate(steps) if s[1].idempotency_key}
    in_caller_transaction = connection.in_atomic_block
    try:
        with transaction.atomic():
            waits = [task.wait_for for _, task, _, _ in steps]
            waited = [(w.event, w.key) for w in waits if w is not None]
            events.lock_names(waited)  # before any task row's lock (broker.queue.events)
            _refuse_kept(idem)
            now = current_time()
            _refuse_held([task for _, task, _, _ in steps], now)
            workflow = Workflow.objects.create(name=name, created_at=now)
            index = {ref: i for i, (ref, *_) in enumerate(steps)}
            waited_for = Counter(index[r] for _, _, after, _ in steps for r in after)
            rows = []
            for i, (ref, task, after, policy) in enumerate(steps):
                row = new_row(task, now)
                row.workflow, row.ref, row.children = workflow, ref, waited_for[i]
                if after:
                    row.state, row.blockers, row.after_policy = _BLOCKED, len(after), policy
                rows.append(row)
            if waited:
                events.plan_waits(rows, waits, now)
            line = keys.line_up(rows)
            Task.objects.bulk_create(rows, batch_size=500)
            if line is not None:
                line.close()
            if waited:
                events.add_waits(rows, waits, now)
            Dependency.objects.bulk_create(
                (
                    Dependency(child_id=rows[i].pk, parent_id=rows[index[r]].pk, position=j,
                               finished_ok=policy == FINISHED)
                    for i, (_, _, after, policy) in enumerate(steps)
                    for j, r in enumerate(after)
                ),
                batch_size=2000,
            )  # fmt: skip
            moves = [(row.queue, None, row.state) for row in rows]
            counters.bump(counters.count_moves(_EVENTS, moves), deferred=in_caller_transaction)
            announce(Counter(row.queue for row in rows if row.state == State.READY))
    except IntegrityError as exc:  # a key taken by another enqueue meanwhile
        if any(task.unique is not None for _, task, _, _ in steps):
            # A racing enqueue took a unique key: the 409 names the step (or this one's
            # idempotency key was the one taken: as below).
            _refuse_held([task for _, task, _, _ in steps], current_time())
        if not idem:
            raise
        raise InvalidTaskError({"steps": ["An idempotency key was taken meanwhile."]}) from exc
    for state, n in Counter(row.state for row in rows).items():
        observe.moved("new", state, count=n)
    return workflow.pk, {row.ref or "": row.pk for row in rows}


def _refuse_held(tasks: Sequence[NewTask], now: datetime) -> None:
    """UniqueKeyHeld naming each step whose unique key a stored task or an earlier step holds."""
    asked = [(i, t.queue, t.unique) for i, t in enumerate(tasks) if t.unique is not None]
    if not asked:
        return
    periods = [u.period_s for _, _, u in asked if u.period_s]
    found = unique.candidates(
        [(q, u.key) for _, q, u in asked], now, max(periods) if periods else None
    )
    held: dict[str, list[str]] = {}
    earlier: set[tuple[str, str]] = set()
    for i, queue_name, asks in asked:
        holder = unique.holder_among(found, queue_name, asks, now)
        if holder is not None:
            held[f"steps.{i}.job.unique"] = [f"Held by task {holder.pk}: steps are new tasks."]
        elif (queue_name, asks.key) in earlier:
            held[f"steps.{i}.job.unique"] = ["Held by an earlier step of this workflow."]
        earlier.add((queue_name, asks.key))
    if held:
        raise UniqueKeyHeld(held)


def _refuse_kept(idem: dict[Any, int]) -> None:
    kept = dict(
        Task.objects.filter(idempotency_key__in=list(idem)).values_list("idempotency_key", "pk")
    )
    if kept:
        raise InvalidTaskError({
            f"steps.{idem[key]}.job.idempotency_key": [
                f"Kept by task {pk}: a workflow's steps are new tasks."
            ]
            for key, pk in kept.items()
        })  # fmt: skip


def cancel_steps(workflow_id: int) -> int:
    """Cancel every step of the workflow not yet done, dead or cancelled, in one transaction
    (with the cascades of their cancels); returns how many moved."""
    with transaction.atomic():
        ids = list(
            Task.objects.filter(workflow_id=workflow_id, state__in=_LIVE)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        return cancel_many(ids)

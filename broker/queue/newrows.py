"""The row a new task makes: the columns an enqueue decides from its spec (its state, its time,
its key columns), shared by the single, many-task and batch enqueues."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from broker.models import Task
from broker.queue import dependencies, unique
from broker.queue.base import NewTask
from broker.states import TRANSITIONS

_READY = TRANSITIONS["enqueue"][1]
_DELAYED = TRANSITIONS["enqueue_delayed"][1]
_BLOCKED = TRANSITIONS["enqueue_blocked"][1]


def given(spec: NewTask, now: datetime) -> dict[str, Any]:
    """The columns of a new task that the enqueue decides (sqlenqueue.NEW_VALUES); the rest are
    fixed.

    A blocked one keeps its delay as available_at - created_at: its delay counts from the
    release (dependencies.after_finish)."""
    delay_ms = unique.first_delay_ms(spec.unique)
    if delay_ms is None:
        delay_ms = spec.delay_ms
    delayed = delay_ms > 0
    available_at = now + timedelta(milliseconds=delay_ms) if delayed else now
    if spec.not_before is not None:
        delayed = spec.not_before > now
        available_at = spec.not_before if delayed else now
    return {
        "state": _DELAYED if delayed else _READY,
        "queue": spec.queue,
        "priority": spec.priority,
        "type": spec.type,
        "payload": spec.payload,
        "max_attempts": spec.max_attempts,
        "available_at": available_at,
        "idempotency_key": spec.idempotency_key,
        "backoff": spec.backoff,
        "key": spec.key,
        "enqueued_by": spec.enqueued_by,
        "unique_key": spec.unique.key if spec.unique is not None else None,
    }


def new_row(spec: NewTask, now: datetime, blocking: dependencies.Blocking | None = None) -> Task:
    row = Task(**given(spec, now), attempts=0, created_at=now, updated_at=now)
    if spec.after:
        row.after_policy = spec.after_policy
    if blocking is not None and blocking.blockers:
        row.state, row.blockers = _BLOCKED, blocking.blockers
    return row

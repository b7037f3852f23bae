"""Tasks and deliveries as the JSON shapes of API.md."""
from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from broker.models import Task, TaskError
from broker.queue import Delivery
from broker.states import PRIORITY_NAMES


def timestamp(value: datetime | None) -> str | None:
    """RFC 3339, UTC, milliseconds: 2026-11-29T11:28:36.123Z."""
    if value is None:
        return None
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _json_text(text: str | None) -> Any:
    # Stored JSON text goes out as it was stored, unparsed.
    return None if text is None else orjson.Fragment(text)


def claimed_task(task: Task) -> dict[str, Any]:
    return {
        "id": str(task.pk),
        "payload": _json_text(task.payload),
        "attempts": task.attempts,
        "max_attempts": task.max_attempts,
        "queue": task.queue,
        "priority": PRIORITY_NAMES[task.priority],
        "type": task.type,
        "created_at": timestamp(task.created_at),
        "available_at": timestamp(task.available_at),
    }


def delivery(d: Delivery) -> dict[str, Any]:
    return {"task": claimed_task(d.task), "lease_id": d.lease_id, "deadline": timestamp(d.deadline)}


def listed_task(task: Task, errors: list[TaskError]) -> dict[str, Any]:
    body = claimed_task(task)
    body.update(
        state=task.state,
        errors=[
            {"attempt": e.attempt, "at": timestamp(e.at), "error": e.error} for e in errors
        ],
        last_error=task.last_error,
        result=_json_text(task.result),
        updated_at=timestamp(task.updated_at),
        worker=task.worker,
        lease_deadline=timestamp(task.lease_deadline),
        idempotency_key=task.idempotency_key,
    )
    return body

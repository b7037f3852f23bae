"""Tasks and deliveries as the JSON shapes of API.md."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import orjson

from broker.models import Task
from broker.queue import ClaimedTask, Delivery
from broker.queue.base import api_time
from broker.queue.dependencies import Parent
from broker.states import PRIORITY_NAMES
from broker.tokens import access
from contract.limits import DEFAULT_AFTER_POLICY

timestamp = api_time  # RFC 3339, UTC, milliseconds: the one rule, beside the claim's SQL


def _json_text(text: str | None) -> Any:
    # Stored JSON text goes out as it was stored, unparsed.
    return None if text is None else orjson.Fragment(text)


def claimed_task(task: Task | ClaimedTask) -> dict[str, Any]:
    """The task fields of a delivery; a claim's times are text already, a model's are not."""
    created, available = task.created_at, task.available_at
    return {
        "id": str(task.pk),
        "payload": _json_text(task.payload),
        "attempts": task.attempts,
        "max_attempts": task.max_attempts,
        "queue": task.queue,
        "priority": PRIORITY_NAMES[task.priority],
        "type": task.type,
        "key": task.key,
        "created_at": created if isinstance(created, str) else timestamp(created),
        "available_at": available if isinstance(available, str) else timestamp(available),
        "checkpoint": _json_text(task.checkpoint),
        "event": _json_text(task.event),
        "workflow": None if task.workflow_id is None else str(task.workflow_id),
        "ref": task.ref,
    }


def _with_parents(
    body: dict[str, Any], parents: Sequence[Parent], results: bool = True
) -> dict[str, Any]:
    """`after` and `parents`: what the task waits or waited for, with their states and (unless
    `results` is False: a list page's) results, so a step reads its inputs without another
    request."""
    body["after"] = [str(p.pk) for p in parents]
    if results:
        body["parents"] = {
            str(p.pk): {"state": p.state, "result": _json_text(p.result)} for p in parents
        }
    else:
        body["parents"] = {str(p.pk): {"state": p.state} for p in parents}
    return body


def delivery(d: Delivery) -> dict[str, Any]:
    task = _with_parents(claimed_task(d.task), d.parents)
    return {"task": task, "lease_id": d.lease_id, "deadline": timestamp(d.deadline)}


class ShownError(NamedTuple):
    """One attempt's error as an answer shows it: the first characters of its text, and the
    whole text's length in characters (more than the head's when it was cut)."""

    attempt: int
    at: datetime
    head: str
    length: int


def _shown_error(e: ShownError) -> dict[str, Any]:
    truncated = e.length > len(e.head)
    shown: dict[str, Any] = {
        "attempt": e.attempt,
        "at": timestamp(e.at),
        "error": e.head,
        "truncated": truncated,
    }
    if truncated:
        shown["length"] = e.length
    return shown


def listed_task(
    task: Task,
    errors: list[ShownError],
    error_count: int,
    last_error: tuple[str | None, int],
    parents: Sequence[Parent] = (),
    parent_results: bool = True,
) -> dict[str, Any]:
    """The task with the newest of its `error_count` errors, each as cut by the caller, and
    `last_error` as (head, whole length); a cut text says so (`truncated`); `parents`: what it
    waits or waited for (`after`), with their results unless `parent_results` is False."""
    last_head, last_length = last_error
    body = _with_parents(claimed_task(task), parents, parent_results)
    # A task without `after` has the default policy, though none applies to it.
    body["after_policy"] = task.after_policy or DEFAULT_AFTER_POLICY
    body.update(
        state=task.state,
        errors=[_shown_error(e) for e in errors],
        error_count=error_count,
        last_error=last_head,
        last_error_truncated=last_head is not None and last_length > len(last_head),
        result=_json_text(task.result),
        updated_at=timestamp(task.updated_at),
        worker=task.worker,
        lease_deadline=timestamp(task.lease_deadline),
        idempotency_key=access.shown_key(task.idempotency_key),
        enqueued_by=task.enqueued_by,
        unique_key=task.unique_key,
        progress=progress(task),
    )
    return body


def progress(task: Task) -> dict[str, Any] | None:
    """The holder's last report: {"fraction", "message", "at"}, or None before any."""
    if task.progress_at is None:
        return None
    return {
        "fraction": task.progress_fraction,
        "message": task.progress_message,
        "at": timestamp(task.progress_at),
    }

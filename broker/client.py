"""enqueue() for Python code sharing the broker's database: the task is part of your transaction.

Imports nothing from Django at module level, so `import broker` works before Django is set up;
the call itself needs a configured Django project whose default database holds the broker's
tables.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from broker.exceptions import InvalidTaskError
from contract.limits import (
    DEFAULT_AFTER_POLICY,
    DEFAULT_DELAY_MS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    MAX_DELAY_DAYS,
    MAX_JSON_DEPTH,
    nests_at_most,
)

__all__ = ["InvalidTaskError", "enqueue", "submit_workflow"]


def enqueue(
    payload: Any,
    *,
    queue: str = DEFAULT_QUEUE,
    priority: str = DEFAULT_PRIORITY,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    delay_ms: int = DEFAULT_DELAY_MS,
    run_after: datetime | None = None,
    type: str | None = None,
    idempotency_key: str | None = None,
    key: str | None = None,
    after: Sequence[str | int] | None = None,
    after_policy: str = DEFAULT_AFTER_POLICY,
    unique: dict[str, Any] | None = None,
    wait_for: dict[str, Any] | None = None,
) -> str:
    """Store a task in the current transaction and return its id (a decimal string).

    Inside `transaction.atomic()` the task exists, and wakes parked claims on every broker
    process, only once the outermost transaction commits; a rollback (of the transaction, or
    of the savepoint it was enqueued in) leaves no trace: no row, no counter, no wake-up.
    Outside a transaction it commits at once, like `POST /jobs`.

    The arguments and their limits are those of `POST /jobs`; `run_after` (an aware datetime)
    is the alternative to `delay_ms`. With an idempotency key already kept, nothing is stored
    and the first task's id comes back. `key` (a tenant's, customer's or entity's id) is what the
    queue's `fair`, `key_max_in_flight` and `ordered` settings share, cap and order by. With
    `after` (task ids), the task starts blocked until those are done (or, with
    `after_policy="finished"`, done, dead or cancelled). `unique` is POST /jobs' `unique`
    (`{"key": "doc-42", "until": "finished", "debounce_ms": 2000, ...}`): with a holder of the
    key, nothing is stored and the holder's id comes back (a pending holder absorbs the
    request: replace, debounce), in your transaction too. `wait_for` is POST /jobs'
    `wait_for` (`{"event": "payment", "key": "order-42", "timeout_ms": 86400000}`): the task
    starts blocked until that event (docs/events.md).

    Raises InvalidTaskError (a ValueError) for anything `POST /jobs` would refuse.
    """
    from broker import queue as broker_queue

    options = {
        "queue": queue,
        "priority": priority,
        "max_attempts": max_attempts,
        "delay_ms": _delay_ms(delay_ms, run_after),
        "type": type,
        "idempotency_key": idempotency_key,
        "key": key,
    }
    if unique is not None:
        options["unique"] = unique
    if wait_for is not None:
        options["wait_for"] = wait_for
    if after is not None:
        options.update(after=[str(pk) for pk in after], after_policy=after_policy)
    try:
        spec = _validated(payload, options)
    except InvalidTaskError as exc:
        if run_after is not None and "delay_ms" in exc.fields:
            # The limit is the API's delay_ms limit, but the caller gave run_after.
            exc.fields["run_after"] = [f"Must be at most {MAX_DELAY_DAYS} days ahead."]
            del exc.fields["delay_ms"]
            raise InvalidTaskError(exc.fields) from None
        raise
    if run_after is not None:
        spec = dataclasses.replace(spec, not_before=run_after)
    pk, _ = broker_queue.enqueue(spec)
    return str(pk)


def _delay_ms(delay_ms: Any, run_after: datetime | None) -> Any:
    if run_after is None:
        return delay_ms
    from django.utils import timezone

    from broker.validation import delay_ms_until

    if delay_ms:
        raise InvalidTaskError({"run_after": ["Give run_after or delay_ms, not both."]})
    if not isinstance(run_after, datetime) or timezone.is_naive(run_after):
        raise InvalidTaskError({"run_after": ["Must be an aware datetime."]})
    return delay_ms_until(run_after)


def _validated(payload: Any, options: dict[str, Any]) -> Any:
    """The payload as a POST /jobs body would carry it, then the API's own validator."""
    from broker import validation
    from contract.conf import broker_settings

    text = validation.json_text(payload)
    # What a POST /jobs body could carry: the parsed text, as the API would have parsed it.
    value = json.loads(text)
    if not nests_at_most(value, MAX_JSON_DEPTH):
        raise InvalidTaskError({"payload": [f"Nests more than {MAX_JSON_DEPTH} deep."]})
    if len(text) > broker_settings.BROKER_MAX_BODY_BYTES:
        limit = broker_settings.BROKER_MAX_BODY_BYTES
        raise InvalidTaskError({"payload": [f"Longer than {limit} bytes as JSON."]})
    return validation.new_task({"payload": value, **options})


def submit_workflow(name: str, steps: Sequence[dict[str, Any]]) -> tuple[str, dict[str, str]]:
    """Store a workflow in the current transaction, as `POST /workflows` would: steps of
    {"ref", "job": <a POST /jobs body, "key" included>, "after": [refs], "after_policy"}, all
    or nothing.
    Returns (workflow id, {ref: task id}).

    Raises InvalidTaskError (a ValueError) naming each problem as the API would
    (`steps.3.after.0`, a cycle, a bad job).
    """
    from broker.workflows import graph

    try:
        workflow_id, tasks = graph.submit({"name": name, "steps": list(steps)})
    except graph.WorkflowError as exc:
        raise InvalidTaskError(exc.fields) from None
    return str(workflow_id), {ref: str(pk) for ref, pk in tasks.items()}

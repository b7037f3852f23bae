"""enqueue() for Python code sharing the broker's database: the task is part of your transaction.

Imports nothing from Django at module level, so `import broker` works before Django is set up;
the call itself needs a configured Django project whose default database holds the broker's
tables.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any


class InvalidTaskError(ValueError):
    """An enqueue the HTTP API would answer with a 400; `fields` names each bad argument."""

    def __init__(self, fields: dict[str, list[str]]) -> None:
        self.fields = fields
        detail = "; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in fields.items())
        super().__init__(f"invalid task: {detail}")


def enqueue(
    payload: Any,
    *,
    queue: str = "default",
    priority: str = "normal",
    max_attempts: int = 3,
    delay_ms: int = 0,
    run_after: datetime | None = None,
    type: str | None = None,
    idempotency_key: str | None = None,
) -> str:
    """Store a task in the current transaction and return its id (a decimal string).

    Inside `transaction.atomic()` the task exists, and wakes parked claims on every broker
    process, only once the outermost transaction commits; a rollback (of the transaction, or
    of the savepoint it was enqueued in) leaves no trace: no row, no counter, no wake-up.
    Outside a transaction it commits at once, like `POST /jobs`.

    The arguments and their limits are those of `POST /jobs`; `run_after` (an aware datetime)
    is the alternative to `delay_ms`. With an idempotency key already kept, nothing is stored
    and the first task's id comes back.

    Raises InvalidTaskError (a ValueError) for anything `POST /jobs` would refuse.
    """
    from broker import queue as broker_queue

    options = {
        "queue": queue, "priority": priority, "max_attempts": max_attempts,
        "delay_ms": _delay_ms(delay_ms, run_after), "type": type,
        "idempotency_key": idempotency_key,
    }
    try:
        spec = _validated(payload, options)
    except InvalidTaskError as exc:
        if run_after is not None and "delay_ms" in exc.fields:
            # The limit is the API's delay_ms limit, but the caller gave run_after.
            exc.fields["run_after"] = ["Must be at most 7 days ahead."]
            del exc.fields["delay_ms"]
            raise InvalidTaskError(exc.fields) from None
        raise
    pk, _ = broker_queue.enqueue(spec)
    return str(pk)


def _delay_ms(delay_ms: Any, run_after: datetime | None) -> Any:
    if run_after is None:
        return delay_ms
    from django.utils import timezone

    if delay_ms:
        raise InvalidTaskError({"run_after": ["Give run_after or delay_ms, not both."]})
    if not isinstance(run_after, datetime) or timezone.is_naive(run_after):
        raise InvalidTaskError({"run_after": ["Must be an aware datetime."]})
    # Round up: the task must not become ready before the time asked for.
    micros = (run_after - timezone.now()) // timedelta(microseconds=1)
    return max(0, -(-micros // 1000))


def _validated(payload: Any, options: dict[str, Any]) -> Any:
    """The API's own serializer decides, so the rules cannot drift apart."""
    from django.conf import settings

    from broker.api.parsing import MAX_JSON_DEPTH, EnqueueSerializer, _nests_at_most, new_task

    try:
        text = json.dumps(payload, allow_nan=False, ensure_ascii=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidTaskError({"payload": [f"Not JSON: {exc}"]}) from exc
    # What a POST /jobs body could carry: the parsed text, as the API would have parsed it.
    value = json.loads(text)
    if not _nests_at_most(value, MAX_JSON_DEPTH):
        raise InvalidTaskError({"payload": [f"Nests more than {MAX_JSON_DEPTH} deep."]})
    if len(text) > settings.BROKER_MAX_BODY_BYTES:
        limit = settings.BROKER_MAX_BODY_BYTES
        raise InvalidTaskError({"payload": [f"Longer than {limit} bytes as JSON."]})
    serializer = EnqueueSerializer(data={"payload": value, **options})
    if not serializer.is_valid():
        raise InvalidTaskError(
            {name: [str(m) for m in _messages(msgs)] for name, msgs in serializer.errors.items()}
        )
    return new_task(serializer.validated_data)


def _messages(detail: Any) -> list[Any]:
    if isinstance(detail, dict):
        return [m for msgs in detail.values() for m in _messages(msgs)]
    return list(detail) if isinstance(detail, list) else [detail]


"""Batch endpoints: one round trip for many tasks (API.md, "Batch endpoints")."""
from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from broker import queue, validation
from broker.api import parsing
from broker.api.base import BrokerView
from broker.api.errors import ValidationFailed
from broker.api.representation import delivery
from broker.api.views import worker_identity
from broker.longpoll import claim_wait, socket_gone
from contract.limits import MAX_BATCH, MAX_CLAIM

_ITEM_ERRORS = {
    404: "The task is not handed out (unknown, reclaimed, cancelled or finished).",
    409: "The task is handed out under another lease.",
}


def _items(body: dict[str, Any], key: str) -> list[Any]:
    parsing.only_fields(body, {key})
    items = body.get(key)
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
        raise ValidationFailed({key: [f"Must be a list of 1 to {MAX_BATCH} items."]})
    return items


class EnqueueBatchView(BrokerView):
    """POST /jobs/batch: all or nothing; a bad item is a 400 naming it by index."""

    def post(self, request: Request) -> Response:
        items = _items(parsing.read_object(request), "jobs")
        ids = queue.enqueue_many(validation.new_tasks(items, "jobs"))
        return Response({"ids": [str(pk) for pk in ids]}, status=201)


class ClaimSerializer(parsing.StrictSerializer):
    max = parsing.StrictIntegerField(min_value=1, max_value=MAX_CLAIM, default=1)
    wait_ms = parsing.StrictIntegerField(min_value=0, default=parsing.DEFAULT_WAIT_MS)
    lease_ms = parsing.StrictIntegerField(min_value=1, default=parsing.DEFAULT_LEASE_MS)
    queues = serializers.ListField(
        child=serializers.RegexField(parsing.QUEUE_PATTERN), required=False, allow_empty=True
    )


class ClaimBatchView(BrokerView):
    """POST /jobs/claim: 1 to `max` deliveries as soon as one is ready, or 204."""

    def post(self, request: Request) -> Response:
        serializer = ClaimSerializer(data=parsing.read_object(request, required=False))
        serializer.is_valid(raise_exception=True)
        args = serializer.validated_data
        got = claim_wait(
            args.get("queues") or None,
            lease_ms=min(args["lease_ms"], parsing.MAX_LEASE_MS),
            wait_ms=min(args["wait_ms"], parsing.MAX_WAIT_MS),
            limit=args["max"],
            worker=worker_identity(request),
            gone=socket_gone(request.META.get("gunicorn.socket")),
        )
        if not got:
            return Response(status=204)
        return Response({"deliveries": [delivery(d) for d in got]})


def _settle_item(item: Any, extra: str) -> tuple[int | None, str, Any] | dict[str, Any]:
    """An ack/nack item → (task id, lease id, extra value), or its 400/404 answer."""
    if not isinstance(item, dict):
        return {"id": None, "status": 400, "error": "Each item must be a JSON object."}
    raw_id = item.get("id")
    unknown = [k for k in item if k not in {"id", "lease_id", extra}]
    lease_id = item.get("lease_id")
    if unknown or not isinstance(raw_id, str) or not isinstance(lease_id, str) or not lease_id:
        problem = f"Unknown field {unknown[0]!r}." if unknown else "id and lease_id are required."
        return {"id": raw_id if isinstance(raw_id, str) else None, "status": 400, "error": problem}
    value = item.get(extra)
    if extra == "error" and value is not None and not isinstance(value, str):
        return {"id": raw_id, "status": 400, "error": "error must be a string."}
    return parsing.task_id(raw_id), lease_id, value


class _SettleBatchView(BrokerView):
    key = ""
    extra = ""

    def post(self, request: Request) -> Response:
        items = _items(parsing.read_object(request), self.key)
        parsed = [_settle_item(item, self.extra) for item in items]
        valid = [p for p in parsed if isinstance(p, tuple)]
        statuses = iter(self.settle(valid))
        results = []
        for item, p in zip(items, parsed, strict=True):
            if isinstance(p, dict):
                results.append(p)
            else:
                status = next(statuses)
                answer: dict[str, Any] = {"id": item["id"], "status": status}
                if status in _ITEM_ERRORS:
                    answer["error"] = _ITEM_ERRORS[status]
                results.append(answer)
        return Response({"results": results})

    def settle(self, items: list[tuple[int | None, str, Any]]) -> list[int]:
        raise NotImplementedError


class AckBatchView(_SettleBatchView):
    """POST /jobs/ack: one transaction, each item answered as its single call would be."""

    key, extra = "acks", "result"

    def settle(self, items: list[tuple[int | None, str, Any]]) -> list[int]:
        return queue.ack_many(items)


class NackBatchView(_SettleBatchView):
    """POST /jobs/nack: one transaction, each item answered as its single call would be."""

    key, extra = "nacks", "error"

    def settle(self, items: list[tuple[int | None, str, Any]]) -> list[int]:
        return queue.nack_many(items)

"""Batch endpoints: one round trip for many tasks (API.md, "Batch endpoints")."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from broker import queue, validation
from broker.api import parsing, settling
from broker.api.base import BrokerView
from broker.api.errors import ValidationFailed
from broker.api.representation import delivery
from broker.api.views import worker_identity
from broker.longpoll import claim_wait, once, parking_of, socket_gone
from contract.limits import MAX_BATCH


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
        ids = queue.enqueue_many(validation.new_tasks(items, "jobs"), "jobs.{}.")
        return Response({"ids": [str(pk) for pk in ids]}, status=201)


class ClaimBatchView(BrokerView):
    """POST /jobs/claim: settle what the body carries, then 1 to `max` deliveries as soon as
    one is ready, or 204 (200 with `results` whenever `acks` or `nacks` was given)."""

    def post(self, request: Request) -> Response:
        args = settling.claim_args(parsing.read_object(request, required=False))
        results = None
        parking = parking_of(request.META)
        if args.settles:
            # Committed before the claim looks or parks: a worker's acks never wait on its wait.
            # Once: a parked claim's request is served again when woken, its acks already done.
            results = once(
                parking,
                "settled",
                lambda: settling.results(args.settle_ids, queue.settle(args.acks, args.nacks)),
            )
        got = claim_wait(
            args.queues,
            lease_ms=args.lease_ms,
            wait_ms=args.wait_ms,
            limit=args.max,
            worker=worker_identity(request),
            gone=socket_gone(request.META.get("gunicorn.socket")),
            parking=parking,
        )
        deliveries = [delivery(d) for d in got]
        if results is not None:
            return Response({"results": results, "deliveries": deliveries})
        if not got:
            return Response(status=204)
        return Response({"deliveries": deliveries})


class _SettleBatchView(BrokerView):
    key = ""

    def post(self, request: Request) -> Response:
        items = _items(parsing.read_object(request), self.key)
        parsed = [settling.item(item, self.key) for item in items]
        valid = [p for p in parsed if isinstance(p, tuple)]
        acks, nacks = (valid, []) if self.key == "acks" else ([], valid)
        answers = iter(queue.settle(acks, nacks))
        results = [
            p if isinstance(p, dict) else settling.answer(item["id"], next(answers).error)
            for item, p in zip(items, parsed, strict=True)
        ]
        return Response({"results": results})


class AckBatchView(_SettleBatchView):
    """POST /jobs/ack: one transaction, each item answered as its single call would be."""

    key = "acks"


class NackBatchView(_SettleBatchView):
    """POST /jobs/nack: one transaction, each item answered as its single call would be."""

    key = "nacks"

"""Batch endpoints: one round trip for many tasks (API.md, "Batch endpoints")."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson
from rest_framework.request import Request
from rest_framework.response import Response

from broker import queue, validation
from broker.api import parsing, settling
from broker.api.base import BrokerView
from broker.api.errors import ValidationFailed
from broker.api.renderers import rendered
from broker.api.representation import delivery
from broker.api.views import worker_identity
from broker.longpoll import Scope, claim_wait, once, parking_of, socket_gone
from broker.tokens import access
from contract.limits import MAX_BATCH


def _items(body: dict[str, Any], key: str) -> list[Any]:
    parsing.only_fields(body, {key})
    items = body.get(key)
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
        raise ValidationFailed({key: [f"Must be a list of 1 to {MAX_BATCH} items."]})
    return items


class EnqueueBatchView(BrokerView):
    """POST /jobs/batch: all or nothing; a bad item is a 400 naming it by index."""

    grants = {"post": "produce"}

    def post(self, request: Request) -> Response:
        items = _items(parsing.read_object(request), "jobs")
        specs = [access.enqueue_spec(request, s) for s in validation.new_tasks(items, "jobs")]
        access.check_after(request, specs, "jobs.{}.")
        ids, deduplicated = queue.enqueue_batch(specs, "jobs.{}.")
        body: dict[str, Any] = {"ids": [str(pk) for pk in ids]}
        if deduplicated:
            body["deduplicated"] = deduplicated
        return Response(body, status=201)


class _Claim(NamedTuple):
    """What a POST /jobs/claim keeps across its dispatches: its claim's parameters, and the
    answer to its settles (rendered: a few bytes an item), not its body."""

    queues: Scope
    wait_ms: int
    lease_ms: int
    max: int
    results: orjson.Fragment | None


def _settle_first(request: Request) -> _Claim:
    """The body checked whole, then its acks and nacks settled and committed, before the claim
    looks or parks: a worker's acks never wait on its wait."""
    args = settling.claim_args(parsing.read_object(request, required=False))
    scope = access.claim_scope(request, args.queues)
    results = None
    if args.settles:
        items, forbidden = access.screen_settles(request, [*args.acks, *args.nacks])
        acks, nacks = items[: len(args.acks)], items[len(args.acks) :]
        answers = settling.results(args.settle_ids, queue.settle(acks, nacks))
        for i, why in forbidden.items():
            answers[i] = access.forbidden_answer(args.settle_ids[i], why)
        results = orjson.Fragment(rendered(answers))
    return _Claim(scope, args.wait_ms, args.lease_ms, args.max, results)


class ClaimBatchView(BrokerView):
    """POST /jobs/claim: settle what the body carries, then 1 to `max` deliveries as soon as
    one is ready, or 204 (200 with `results` whenever `acks` or `nacks` was given)."""

    grants = {"post": "consume"}

    def post(self, request: Request) -> Response:
        parking = parking_of(request.META)
        # Once: a parked claim's request is served again when woken, its acks already done and
        # its body gone (broker.parking.loop.Slot).
        claim = once(parking, "claim", lambda: _settle_first(request))
        got = claim_wait(
            claim.queues,
            lease_ms=claim.lease_ms,
            wait_ms=claim.wait_ms,
            limit=claim.max,
            worker=worker_identity(request),
            gone=socket_gone(request.META.get("gunicorn.socket")),
            parking=parking,
        )
        deliveries = [delivery(d) for d in got]
        if claim.results is not None:
            return Response({"results": claim.results, "deliveries": deliveries})
        if not got:
            return Response(status=204)
        return Response({"deliveries": deliveries})


class _SettleBatchView(BrokerView):
    key = ""
    grants = {"post": "consume"}

    def post(self, request: Request) -> Response:
        items = _items(parsing.read_object(request), self.key)
        parsed = [settling.item(item, self.key) for item in items]
        given = [p for p in parsed if isinstance(p, tuple)]
        valid, forbidden = access.screen_settles(request, given)
        acks, nacks = (valid, []) if self.key == "acks" else ([], valid)
        answers = iter(queue.settle(acks, nacks))
        refusals = iter(forbidden.get(i) for i in range(len(valid)))
        results = [
            p if isinstance(p, dict) else _answer(item["id"], next(answers).error, next(refusals))
            for item, p in zip(items, parsed, strict=True)
        ]
        return Response({"results": results})


def _answer(task_id: str, error: Any, refused: access.Forbidden | None) -> dict[str, Any]:
    if refused is not None:
        return access.forbidden_answer(task_id, refused)
    return settling.answer(task_id, error)


class AckBatchView(_SettleBatchView):
    """POST /jobs/ack: one transaction, each item answered as its single call would be."""

    key = "acks"


class NackBatchView(_SettleBatchView):
    """POST /jobs/nack: one transaction, each item answered as its single call would be."""

    key = "nacks"

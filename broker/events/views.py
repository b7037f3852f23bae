"""POST /events, GET /events and POST /jobs/{id}/wait: each parses, calls broker.queue.events,
answers."""

from __future__ import annotations

import json
from typing import Any

import orjson
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from broker.api import parsing
from broker.api.base import BrokerView
from broker.api.errors import ValidationFailed
from broker.api.representation import timestamp
from broker.enqueueoptions import WaitForSerializer, wait_from_attrs
from broker.exceptions import TaskNotFound, TaskNotHeld
from broker.models import Event
from broker.queue import events
from broker.tokens import access
from broker.validation import AnyJSONField
from contract import limits
from contract.errors import flatten
from contract.fields import StrictSerializer, StrictString

_TOO_BIG = "Is {} bytes as JSON; at most {} are kept."


def _json_bytes(value: Any) -> int:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


class EventSerializer(StrictSerializer):
    """A POST /events body."""

    name = StrictString(min_length=1, max_length=limits.MAX_EVENT_NAME, trim_whitespace=False)
    key = StrictString(min_length=1, max_length=limits.MAX_EVENT_KEY, trim_whitespace=False)
    data = AnyJSONField(required=False, default="null")


def event_body(event: Event) -> dict[str, Any]:
    """API.md's event: {"id", "name", "key", "data", "at"}."""
    return {
        "id": str(event.pk),
        "name": event.name,
        "key": event.key,
        "data": orjson.Fragment(event.data),
        "at": timestamp(event.received_at),
    }


class EventsView(BrokerView):
    """POST /events receives an event (→ 202); GET /events lists kept ones, newest first."""

    grants = {"post": "produce", "get": "read:*"}

    def post(self, request: Request) -> Response:
        body = parsing.read_object(request)
        scope = access.listed_patterns(request, "produce")  # 403 without produce anywhere
        problems: dict[str, list[str]] = {}
        if "data" in body and (size := _json_bytes(body["data"])) > limits.MAX_EVENT_DATA_BYTES:
            problems["data"] = [_TOO_BIG.format(size, limits.MAX_EVENT_DATA_BYTES)]
        try:
            attrs = EventSerializer().run_validation(body)
        except serializers.ValidationError as exc:
            problems = {**flatten(exc.detail), **problems}
        if problems:
            raise ValidationFailed(problems)
        posted = events.post_event(attrs["name"], attrs["key"], attrs["data"], scope)
        return Response({"id": str(posted.pk), "released": posted.released}, status=202)

    def get(self, request: Request) -> Response:
        name = parsing.query_text(request.GET, "name")
        key = parsing.query_text(request.GET, "key")
        rows = events.list_events(name, key)
        page, next_url = parsing.newest_first(
            request, rows, limits.DEFAULT_PAGE_SIZE, limits.MAX_PAGE_SIZE
        )
        return Response({"results": [event_body(e) for e in page], "next": next_url})


_WAIT_FIELDS = set(WaitForSerializer._declared_fields)


class WaitView(BrokerView):
    """POST /jobs/{id}/wait: the holder suspends its task until an event."""

    grants = {"post": "consume"}

    def post(self, request: Request, task_id: str) -> Response:
        body = parsing.read_object(request)
        lease_id = parsing.lease_id_from(request, body)
        allowed = {"lease_id", "checkpoint", *_WAIT_FIELDS}
        problems = {k: ["Unknown field."] for k in body if k not in allowed}
        checkpoint = None
        if "checkpoint" in body:
            size = _json_bytes(body["checkpoint"])
            if size > limits.MAX_CHECKPOINT_BYTES:
                problems["checkpoint"] = [_TOO_BIG.format(size, limits.MAX_CHECKPOINT_BYTES)]
            elif body["checkpoint"] is not None:
                checkpoint = parsing.dump_json(body["checkpoint"])
        asked = {k: v for k, v in body.items() if k in _WAIT_FIELDS}
        try:
            wait = wait_from_attrs(WaitForSerializer().run_validation(asked))
        except serializers.ValidationError as exc:
            problems = {**flatten(exc.detail), **problems}
        if problems:
            raise ValidationFailed(problems)
        assert wait is not None  # noqa: S101 -- validated
        pk = parsing.task_id(task_id)
        if pk is None:
            raise TaskNotFound()
        access.require_task(request, "consume", pk, TaskNotHeld)
        state = events.suspend(pk, lease_id=lease_id, wait=wait, checkpoint=checkpoint)
        return Response({"state": state})

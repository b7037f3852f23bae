"""The OpenAPI of /events and POST /jobs/{id}/wait, merged into the API's by broker/api."""

from __future__ import annotations

from broker.api.schema_components import (
    _TIME,
    ANY_JSON,
    WAIT_FOR_FIELDS,
    Schema,
    _object,
    ref,
)
from broker.api.schema_operations import (
    BAD_REQUEST,
    LEASE_ID,
    NOT_HELD,
    OTHER_LEASE,
    TASK_ID,
    _body,
    _op,
    _query,
    answer,
)
from contract import limits

_EVENT_FIELDS: dict[str, Schema] = {
    "name": {"type": "string", "minLength": 1, "maxLength": limits.MAX_EVENT_NAME},
    "key": {"type": "string", "minLength": 1, "maxLength": limits.MAX_EVENT_KEY},
    "data": {
        **ANY_JSON,
        "description": f"Any JSON (default null), at most {limits.MAX_EVENT_DATA_BYTES} bytes as "
        "compact UTF-8 JSON; released tasks carry it in `event.data`.",
    },
}

COMPONENTS: dict[str, Schema] = {
    "EventRequest": _object(_EVENT_FIELDS, ["name", "key"], closed=True),
    "Event": _object(
        {"id": {"type": "string"}, **_EVENT_FIELDS, "at": _TIME},
        ["id", "name", "key", "data", "at"],
    ),
    "EventPosted": _object(
        {
            "id": {"type": "string", "description": "The event's id."},
            "released": {
                "type": "integer",
                "minimum": 0,
                "description": "Tasks whose wait it ended (released to ready or delayed, or "
                "still blocked on their `after`).",
            },
        },
        ["id", "released"],
    ),
    "EventPage": _object(
        {
            "results": {"type": "array", "items": ref("Event"), "description": "Newest first."},
            "next": {"type": "string", "nullable": True, "description": "The next page's URL."},
        },
        ["results", "next"],
    ),
    "WaitRequest": _object(
        {
            **WAIT_FOR_FIELDS,
            "checkpoint": {**ANY_JSON, "description": "Kept for the next delivery."},
            "lease_id": {"type": "string", "description": "Or ?lease_id= in the query."},
        },
        ["event", "key"],
        closed=True,
    ),
    "WaitAnswer": _object(
        {
            "state": {
                "type": "string",
                "enum": ["blocked", "ready"],
                "description": "blocked on the event; ready when a kept event matched already.",
            }
        },
        ["state"],
    ),
}

OPERATIONS: dict[str, dict[str, Schema]] = {
    "broker.events.views.EventsView": {
        "post": _op(
            "post_event",
            "Receive an event: release every task waiting for its name and key",
            "events",
            {
                202: answer("Kept, and its waiters released.", ref("EventPosted")),
                400: BAD_REQUEST,
            },
            requestBody=_body(ref("EventRequest"), required=True),
        ),
        "get": _op(
            "list_events",
            "List kept events, newest first",
            "events",
            {200: answer("One page.", ref("EventPage")), 400: BAD_REQUEST},
            parameters=[
                _query("name", {"type": "string"}, "Only events of this name."),
                _query("key", {"type": "string"}, "Only events of this key."),
                _query(
                    "limit",
                    {"type": "integer", "minimum": 1, "maximum": limits.MAX_PAGE_SIZE,
                     "default": limits.DEFAULT_PAGE_SIZE},
                    "Page size.",
                ),
                _query("cursor", {"type": "string"}, "Given by `next`."),
            ],
        ),
    },
    "broker.events.views.WaitView": {
        "post": _op(
            "wait",
            "Suspend a held task until an event: the lease and the attempt given back",
            "jobs",
            {
                200: answer("Suspended.", ref("WaitAnswer")),
                400: BAD_REQUEST,
                404: NOT_HELD,
                409: OTHER_LEASE,
            },
            parameters=[TASK_ID, LEASE_ID],
            requestBody=_body(ref("WaitRequest"), required=True),
        ),
    },
}  # fmt: skip

"""The OpenAPI of /queues and /schedules (broker/api/operate.py): their operations and shapes,
merged into the API's by broker/api/schema.py."""

from __future__ import annotations

from typing import Any

from broker.api.schema_components import (
    _GAUGE_FIELDS,
    _TEXT_OR_NULL,
    _TIME_OR_NULL,
    Schema,
    _object,
    ref,
)
from broker.api.schema_operations import (
    BAD_REQUEST,
    CURSOR,
    LIMIT,
    _body,
    _op,
    answer,
    error_answer,
)
from contract import limits

_QUEUE_SETTINGS: dict[str, Schema] = {
    "paused": {"type": "boolean", "description": "Claims take nothing from the queue."},
    "max_in_flight": {
        "type": "integer", "minimum": 1, "maximum": limits.MAX_IN_FLIGHT, "nullable": True,
        "description": "At most this many of its tasks handed out at once, across processes.",
    },
    "rate_per_s": {
        "type": "number", "exclusiveMinimum": True, "minimum": 0,
        "maximum": limits.MAX_RATE_PER_S, "nullable": True,
        "description": "At most this many claims a second; over T seconds at most "
                       "rate_per_s x T + max(1, rate_per_s).",
    },
}  # fmt: skip
_QUEUE_SETTINGS.update({
    "fair": {"type": "boolean", "description": "Claims share the queue among keys."},
    "key_max_in_flight": {
        "type": "integer", "minimum": 1, "maximum": limits.MAX_IN_FLIGHT, "nullable": True,
        "description": "At most this many tasks of one key handed out at once.",
    },
    "ordered": {"type": "boolean",
                "description": "Per key, one task at a time, in enqueue order."},
})  # fmt: skip
_QUEUE_FIELDS: dict[str, Schema] = {
    "name": ref("QueueName"),
    **_QUEUE_SETTINGS,
    **_GAUGE_FIELDS,
}
_SCHEDULE_TIMING: dict[str, Schema] = {
    "cron": {
        "type": "string", "nullable": True, "maxLength": limits.MAX_CRON,
        "description": "5 fields, in `timezone`; or give `every_s`.",
    },
    "timezone": {
        "type": "string", "nullable": True,
        "description": "An IANA time zone name (default UTC); cron schedules only.",
    },
    "every_s": {
        "type": "integer", "minimum": 1, "maximum": limits.MAX_EVERY_S, "nullable": True,
        "description": "Seconds between due times; or give `cron`.",
    },
}  # fmt: skip
_SCHEDULE_NAME: Schema = {
    "type": "string", "pattern": f"^{limits.SCHEDULE_NAME_RULE}$", "minLength": 1,
    "maxLength": limits.MAX_SCHEDULE_NAME,
}  # fmt: skip
_SCHEDULE_CHANGES: dict[str, Schema] = {
    **_SCHEDULE_TIMING,
    "job": {**ref("EnqueueRequest"), "description": "A POST /jobs body, without an "
            "idempotency_key: each due time enqueues a task of its own."},
    "paused": {"type": "boolean"},
}  # fmt: skip

COMPONENTS: dict[str, Schema] = {
    "Queue": _object(_QUEUE_FIELDS, list(_QUEUE_FIELDS)),
    "Queues": _object(
        {
            "results": {"type": "array", "items": ref("Queue")},
            "next": {"type": "string", "nullable": True, "description": "URL of the next page."},
        },
        ["results", "next"],
    ),
    "QueueSettings": _object(_QUEUE_SETTINGS, [], closed=True),
    "Schedule": _object(
        {
            "name": _SCHEDULE_NAME,
            **_SCHEDULE_CHANGES,
            "next_run_at": _TIME_OR_NULL,
            "last_run_at": _TIME_OR_NULL,
            "last_task_id": _TEXT_OR_NULL,
        },
        ["name", *_SCHEDULE_CHANGES, "next_run_at", "last_run_at", "last_task_id"],
    ),
    "Schedules": _object({"results": {"type": "array", "items": ref("Schedule")}}, ["results"]),
    "ScheduleRequest": _object(
        {"name": _SCHEDULE_NAME, **_SCHEDULE_CHANGES}, ["name", "job"], closed=True
    ),
    "ScheduleChanges": _object(_SCHEDULE_CHANGES, [], closed=True),
}

QUEUE_NAME = {"name": "name", "in": "path", "required": True, "schema": ref("QueueName")}
SCHEDULE_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
NO_SCHEDULE = error_answer("No such schedule.")


def _on_schedule(op_id: str, summary: str, responses: dict[int, Schema], **rest: Any) -> Schema:
    """An operation on /schedules/{name}: a 404 when no schedule has that name."""
    return _op(
        op_id,
        summary,
        "schedules",
        {**responses, 404: NO_SCHEDULE},
        parameters=[SCHEDULE_NAME],
        **rest,
    )


OPERATIONS: dict[str, dict[str, Schema]] = {
    "broker.api.operate.QueuesView": {
        "get": _op(
            "list_queues",
            "Every queue: settings and gauges",
            "queues",
            {
                200: answer("Queues a task or a setting named, newest named first.", ref("Queues")),
                400: BAD_REQUEST,
            },
            parameters=[LIMIT, CURSOR],
        ),
    },
    "broker.api.operate.QueueView": {
        "get": _op(
            "get_queue",
            "One queue",
            "queues",
            {
                200: answer("Its settings and gauges.", ref("Queue")),
                404: error_answer("No task and no setting ever named it."),
            },
            parameters=[QUEUE_NAME],
        ),
        "patch": _op(
            "set_queue",
            "Pause, resume or limit a queue (a new name creates its settings)",
            "queues",
            {200: answer("The queue now.", ref("Queue")), 400: BAD_REQUEST},
            parameters=[QUEUE_NAME],
            requestBody=_body(ref("QueueSettings"), required=True),
        ),
    },
    "broker.api.operate.SchedulesView": {
        "post": _op(
            "create_schedule",
            "Create a schedule",
            "schedules",
            {
                201: answer("Created.", ref("Schedule")),
                400: error_answer(
                    "A field is invalid, or BROKER_MAX_SCHEDULES schedules exist already "
                    "(`fields` names `name`); `fields` names each offender."
                ),
                409: error_answer("A schedule with this name exists."),
            },
            requestBody=_body(ref("ScheduleRequest"), required=True),
        ),
        "get": _op(
            "list_schedules",
            "Every schedule",
            "schedules",
            {200: answer("By name.", ref("Schedules"))},
        ),
    },
    "broker.api.operate.ScheduleView": {
        "get": _on_schedule(
            "get_schedule", "One schedule", {200: answer("The schedule.", ref("Schedule"))}
        ),
        "patch": _on_schedule(
            "change_schedule",
            "Pause, resume, retime or change a schedule's job",
            {200: answer("The schedule now.", ref("Schedule")), 400: BAD_REQUEST},
            requestBody=_body(ref("ScheduleChanges"), required=True),
        ),
        "delete": _on_schedule("delete_schedule", "Delete a schedule", {204: answer("Deleted.")}),
    },
}

"""The JSON shapes of API.md as OpenAPI 3.0 component schemas, written out by hand.

Written, not introspected: the views parse bodies themselves, and the contract's fine print
(unknown fields rejected, which fields take null, the caps) has to be stated exactly.
"""

from __future__ import annotations

from typing import Any

from broker.states import COUNTERS, GAUGE_STATES, PRIORITY_BY_NAME, State
from contract import limits

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(properties: dict[str, Schema], required: list[str], *, closed: bool = False) -> Schema:
    schema: Schema = {"type": "object", "properties": properties}
    if required:  # OpenAPI 3.0 forbids an empty list
        schema["required"] = required
    if closed:
        schema["additionalProperties"] = False
    return schema


_COUNT: Schema = {"type": "integer", "minimum": 0}
_TIME: Schema = {"type": "string", "format": "date-time"}
_TIME_OR_NULL: Schema = {**_TIME, "nullable": True}
_TEXT_OR_NULL: Schema = {"type": "string", "nullable": True}
# No "type": any JSON value, null included.
ANY_JSON: Schema = {"description": "Any JSON value, null included; it comes back as sent."}

_CLAIMED_TASK_FIELDS: dict[str, Schema] = {
    "id": {"type": "string", "description": "Opaque task id."},
    "payload": ANY_JSON,
    "attempts": {**_COUNT, "description": "Deliveries so far, this one included."},
    "max_attempts": {
        "type": "integer",
        "minimum": limits.MIN_ATTEMPTS,
        "nullable": True,
        "description": "At most 100 over this API; up to 1000 (an SQS RedrivePolicy), or null "
        "(unlimited: an SQS message without one) for messages sent over `/sqs`.",
    },
    "queue": {"type": "string"},
    "priority": ref("Priority"),
    "type": _TEXT_OR_NULL,
    "key": {**_TEXT_OR_NULL, "description": "Its tenant's, customer's or entity's id."},
    "created_at": _TIME,
    "available_at": _TIME,
    "checkpoint": {
        **ANY_JSON,
        "description": "The last checkpoint its holders reported (POST /jobs/{id}/progress), "
        "null when none: a redelivered task resumes from it.",
    },
    "event": {
        "type": "object",
        "nullable": True,
        "properties": {
            "id": {"type": "string"}, "name": {"type": "string"}, "key": {"type": "string"},
            "data": ANY_JSON, "at": _TIME,
        },
        "required": ["id", "name", "key", "data", "at"],
        "description": "The event that released it from a wait (`wait_for`, POST "
        "/jobs/{id}/wait); null before, and after a wait that timed out.",
    },
    "workflow": {**_TEXT_OR_NULL, "description": "The workflow it is a step of."},
    "ref": {**_TEXT_OR_NULL, "description": "Its step's ref in that workflow."},
    "after": {
        "type": "array", "items": {"type": "string"},
        "description": "The tasks it waits or waited for (`[]` when none).",
    },
    "parents": {
        "type": "object",
        "additionalProperties": _object({"state": ref("State"), "result": ANY_JSON},
                                        ["state", "result"]),
        "description": "Per task in `after`: its state and result (`{}` when none).",
    },
}  # fmt: skip
_LISTED_TASK_FIELDS: dict[str, Schema] = {
    **_CLAIMED_TASK_FIELDS,
    "parents": {
        "type": "object",
        "additionalProperties": _object({"state": ref("State"), "result": ANY_JSON}, ["state"]),
        "description": "Per task in `after`: its state, and its result on GET /jobs/{id} (a "
        "list page leaves the results out: `{}` when none).",
    },
    "after_policy": {
        "type": "string",
        "enum": list(limits.AFTER_POLICIES),
        "description": "How it waits for `after` (the default, done, when it waits for none).",
    },
    "state": ref("State"),
    "errors": {"type": "array", "items": ref("AttemptError")},
    "last_error": _TEXT_OR_NULL,
    "result": ANY_JSON,
    "updated_at": _TIME,
    "worker": {**_TEXT_OR_NULL, "description": "X-Broker-Worker of the current holder."},
    "lease_deadline": _TIME_OR_NULL,
    "idempotency_key": _TEXT_OR_NULL,
    "enqueued_by": {
        **_TEXT_OR_NULL,
        "description": "The name of the access token that enqueued it; null otherwise.",
    },
    "unique_key": {**_TEXT_OR_NULL, "description": "The key of its `unique`; null for none."},
    "progress": {
        **ref("Progress"),
        "nullable": True,
        "description": "The holder's last report; null before any. Kept once done.",
    },
}
_FRACTION: Schema = {"type": "number", "minimum": 0, "maximum": 1, "nullable": True}
_MESSAGE: Schema = {"type": "string", "maxLength": limits.MAX_PROGRESS_MESSAGE, "nullable": True}

# `wait_for`, and POST /jobs/{id}/wait's body (API.md "Waiting for events, and approvals").
WAIT_FOR_FIELDS: dict[str, Schema] = {
    "event": {"type": "string", "minLength": 1, "maxLength": limits.MAX_EVENT_NAME},
    "key": {"type": "string", "minLength": 1, "maxLength": limits.MAX_EVENT_KEY},
    "since": {
        **_TIME,
        "description": "Only an event received at or after this matches (default: any kept).",
    },
    "timeout_ms": {
        "type": "integer",
        "minimum": 1,
        "maximum": limits.MAX_WAIT_TIMEOUT_MS,
        "description": "The wait ends this long after it began (default: never).",
    },
    "on_timeout": {
        "type": "string",
        "enum": list(limits.ON_TIMEOUT),
        "default": limits.DEFAULT_ON_TIMEOUT,
        "description": "cancel: the task is cancelled (with the cancel cascade); run: it is "
        "released with event null.",
    },
}
WAIT_FOR_OBJECT = _object(WAIT_FOR_FIELDS, ["event", "key"], closed=True)

_ENQUEUE_FIELDS: dict[str, Schema] = {
    "payload": {**ANY_JSON, "description": "Required (the key must be present); any JSON."},
    "max_attempts": {
        "type": "integer",
        "minimum": limits.MIN_ATTEMPTS,
        "maximum": limits.MAX_ATTEMPTS,
        "default": limits.DEFAULT_MAX_ATTEMPTS,
    },
    "delay_ms": {
        "type": "integer",
        "minimum": 0,
        "maximum": limits.MAX_DELAY_MS,
        "default": limits.DEFAULT_DELAY_MS,
    },
    "queue": {**ref("QueueName")},
    "priority": ref("Priority"),
    "type": {
        "type": "string",
        "nullable": True,
        "maxLength": limits.MAX_TYPE_NAME,
        "description": "A registered job type whose payload is validated; unknown types are a 400.",
    },
    "idempotency_key": {
        "type": "string",
        "nullable": True,
        "maxLength": limits.MAX_IDEMPOTENCY_KEY,
        "description": "A repeat with a key still kept answers 200 with the first task's id.",
    },
    "key": {
        "type": "string", "nullable": True, "minLength": 1, "maxLength": limits.MAX_KEY,
        "description": "A tenant's, customer's or entity's id: fair queues share claims among "
                       "keys, key_max_in_flight caps each, ordered queues run each key's tasks "
                       "one at a time in order.",
    },
    "after": {
        "type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": limits.MAX_AFTER,
        "uniqueItems": True, "nullable": True,
        "description": "Ids of existing tasks to wait for: the task starts blocked.",
    },
    "after_policy": {
        "type": "string", "enum": list(limits.AFTER_POLICIES),
        "default": limits.DEFAULT_AFTER_POLICY,
        "description": "done: released when all are done (a cancel cascades); finished: "
                       "when all are done, dead or cancelled.",
    },
    "unique": {
        **_object(
            {
                "key": {"type": "string", "minLength": 1, "maxLength": limits.MAX_UNIQUE_KEY},
                "until": {"type": "string", "enum": list(limits.UNIQUE_UNTIL),
                          "default": limits.DEFAULT_UNIQUE_UNTIL},
                "period_s": {"type": "integer", "minimum": 1,
                             "maximum": limits.MAX_UNIQUE_PERIOD_S,
                             "description": "Required with until period, refused otherwise."},
                "on_conflict": {"type": "string", "enum": list(limits.UNIQUE_ON_CONFLICT),
                                "default": limits.DEFAULT_UNIQUE_ON_CONFLICT},
                "debounce_ms": {"type": "integer", "minimum": 0,
                                "maximum": limits.MAX_DEBOUNCE_MS,
                                "description": "Not with delay_ms."},
                "debounce_max_ms": {"type": "integer", "minimum": 1,
                                    "maximum": limits.MAX_DEBOUNCE_MAX_MS,
                                    "description": "Needs debounce_ms."},
            },
            ["key"],
            closed=True,
        ),
        "nullable": True,
        "description": "At most one task of the queue per key while `until` says so: a held "
                       "key answers 200 with the holder's id, which a pending holder absorbs "
                       "(replace, debounce).",
    },
    "wait_for": {
        **WAIT_FOR_OBJECT,
        "nullable": True,
        "description": "Start blocked until the event with this name and key is received (a "
                       "kept one received at or after `since` matches at once).",
    },
}  # fmt: skip

_GAUGE_FIELDS: dict[str, Schema] = {state.value: _COUNT for state in GAUGE_STATES}
_REASON = {
    "type": "string",
    "enum": ["parent_dead", "blocked", "event", "delayed", "retry_backoff", "queue_paused",
             "queue_full", "key_busy", "key_full", "rate_limited", "no_workers", "queued"],
}  # fmt: skip

_SETTLE_ITEM_RESULT = _object(
    {
        "id": {"type": "string", "nullable": True},
        "status": {"type": "integer", "enum": [204, 400, 404, 409]},
        "error": {"type": "string"},
    },
    ["id", "status"],
)


def _settle_batch(key: str, extra: str) -> Schema:
    items = {
        "type": "array",
        "minItems": 1,
        "maxItems": limits.MAX_BATCH,
        "items": {"description": f"{{id, lease_id, {extra}}}; a bad item gets its own 400."},
    }
    return _object({key: items}, [key], closed=True)


def _settle_items(extra: str) -> Schema:
    item = _object(
        {"id": {"type": "string"}, "lease_id": {"type": "string", "minLength": 1}, extra: {}},
        ["id", "lease_id"],
        closed=True,
    )
    return {"type": "array", "maxItems": limits.MAX_BATCH, "items": item}


# Split in three so that broker/api/schema.py can slot the queues', schedules' and history's
# shapes in between: the document lists them in the order they always had.
TASK_COMPONENTS: dict[str, Schema] = {
    "Error": _object(
        {
            "error": {"type": "string", "description": "One human sentence."},
            "fields": {
                "type": "object",
                "description": "Each offending field (dotted path) and its messages.",
                "additionalProperties": {"type": "array", "items": {"type": "string"}},
            },
        },
        ["error"],
    ),
    "Priority": {"type": "string", "enum": list(PRIORITY_BY_NAME)},
    "State": {"type": "string", "enum": list(State.values)},
    "QueueName": {
        "type": "string",
        "pattern": limits.QUEUE_PATTERN,
        "minLength": 1,
        "maxLength": limits.MAX_QUEUE_NAME,
    },
    "AttemptError": _object(
        {"attempt": {"type": "integer"}, "at": _TIME, "error": {"type": "string"}},
        ["attempt", "at", "error"],
    ),
    "ClaimedTask": _object(_CLAIMED_TASK_FIELDS, list(_CLAIMED_TASK_FIELDS)),
    "Task": _object(_LISTED_TASK_FIELDS, list(_LISTED_TASK_FIELDS)),
    "OneTask": _object(
        {**_LISTED_TASK_FIELDS, "waiting": {**ref("Waiting"), "nullable": True}},
        [*_LISTED_TASK_FIELDS, "waiting"],
    ),
    "Waiting": _object(
        {
            "reason": _REASON,
            "detail": {"type": "string", "description": "One human sentence."},
            "until": {
                **_TIME,
                "nullable": True,
                "description": "delayed, retry_backoff: when it becomes ready; event: when "
                "its wait times out (null: never).",
            },
            "event": {"type": "string", "description": "event: the event's name it waits for."},
            "key": {"type": "string", "description": "event: the event's key it waits for."},
            "ahead": {**_COUNT, "description": "queued: ready tasks of its queue claimed first."},
            "on": {
                "type": "array",
                "items": {"type": "string"},
                "description": "blocked, parent_dead: the tasks it still waits for.",
            },
        },
        ["reason", "detail"],
    ),
}
LEASE_COMPONENTS: dict[str, Schema] = {
    "TaskPage": _object(
        {
            "results": {"type": "array", "items": ref("Task")},
            "next": {
                "type": "string",
                "nullable": True,
                "description": "URL of the next page: it goes on after this page's last task (a "
                f"page stops adding tasks once its answer passes {limits.MAX_ANSWER_BYTES} "
                "bytes, whatever `limit` asked).",
            },
        },
        ["results", "next"],
    ),
    "Delivery": _object(
        {"task": ref("ClaimedTask"), "lease_id": {"type": "string"}, "deadline": _TIME},
        ["task", "lease_id", "deadline"],
    ),
    "EnqueueRequest": _object(_ENQUEUE_FIELDS, ["payload"], closed=True),
    "Enqueued": _object(
        {
            "id": {"type": "string"},
            "deduplicated": {"type": "boolean", "description": "Its unique key's holder."},
            "replaced": {"type": "boolean", "description": "The holder took this body."},
        },
        ["id"],
    ),
    "Deadline": _object({"deadline": _TIME}, ["deadline"]),
    "AckRequest": _object({"lease_id": {"type": "string"}, "result": ANY_JSON}, [], closed=True),
    "NackRequest": _object(
        {"lease_id": {"type": "string"}, "error": _TEXT_OR_NULL}, [], closed=True
    ),
    "ExtendRequest": _object(
        {
            "lease_id": {"type": "string"},
            "lease_ms": {"type": "integer", "minimum": limits.MIN_LEASE_MS},
        },
        [],
        closed=True,
    ),
    "Progress": _object(
        {"fraction": _FRACTION, "message": _MESSAGE, "at": {**_TIME, "description": "Reported."}},
        ["fraction", "message", "at"],
    ),
    "ProgressRequest": _object(
        {
            "lease_id": {"type": "string"},
            "lease_ms": {
                "type": "integer",
                "minimum": limits.MIN_LEASE_MS,
                "description": "Also extend the lease to now + lease_ms (capped as extend's).",
            },
            "fraction": _FRACTION,
            "message": _MESSAGE,
            "checkpoint": {
                **ANY_JSON,
                "description": f"At most {limits.MAX_CHECKPOINT_BYTES} bytes as compact UTF-8 "
                "JSON; handed out again with the task's next delivery.",
            },
        },
        [],
        closed=True,
    ),
    "Gauges": _object(_GAUGE_FIELDS, [s.value for s in GAUGE_STATES]),
    "Stats": _object(
        {
            **{state.value: _COUNT for state in GAUGE_STATES},
            "totals": _object(dict.fromkeys(COUNTERS, _COUNT), list(COUNTERS)),
            "queues": {"type": "object", "additionalProperties": ref("Gauges")},
        },
        [*(s.value for s in GAUGE_STATES), "totals"],
    ),
}
BATCH_COMPONENTS: dict[str, Schema] = {
    "Health": _object({"status": {"type": "string", "enum": ["ok"]}}, ["status"]),
    "EnqueueBatchRequest": _object(
        {
            "jobs": {
                "type": "array",
                "items": ref("EnqueueRequest"),
                "minItems": 1,
                "maxItems": limits.MAX_BATCH,
            }
        },
        ["jobs"],
        closed=True,
    ),
    "EnqueuedBatch": _object(
        {
            "ids": {"type": "array", "items": {"type": "string"}},
            "deduplicated": {
                "type": "array",
                "items": {"type": "integer"},
                "description": "Indexes of the items a unique key's holder answered.",
            },
        },
        ["ids"],
    ),
    "ClaimRequest": _object(
        {
            "max": {
                "type": "integer",
                "minimum": 1,
                "maximum": limits.MAX_CLAIM,
                "default": limits.DEFAULT_CLAIM,
            },
            "wait_ms": {"type": "integer", "minimum": 0, "default": limits.DEFAULT_WAIT_MS},
            "lease_ms": {
                "type": "integer",
                "minimum": limits.MIN_LEASE_MS,
                "default": limits.DEFAULT_LEASE_MS,
            },
            "queues": {
                "type": "array",
                "items": ref("QueueName"),
                "minItems": 1,
                "description": "Queues to claim from; every queue when left out.",
            },
            "acks": {
                **_settle_items("result"),
                "description": "Settle these first (with `nacks`: at most "
                f"{limits.MAX_BATCH} in all); the answer then carries `results`.",
            },
            "nacks": _settle_items("error"),
        },
        [],
        closed=True,
    ),
    "Deliveries": _object(
        {
            "deliveries": {
                "type": "array",
                "items": ref("Delivery"),
                "minItems": 1,
                "description": "1 to `max`: no delivery is added once the answer passes "
                f"{limits.MAX_ANSWER_BYTES} bytes (the tasks left out stay ready).",
            }
        },
        ["deliveries"],
    ),
    "SettledAndDeliveries": _object(
        {
            "results": {"type": "array", "items": _SETTLE_ITEM_RESULT},
            "deliveries": {"type": "array", "items": ref("Delivery")},
        },
        ["results", "deliveries"],
    ),
    "AckBatchRequest": _settle_batch("acks", "result"),
    "NackBatchRequest": _settle_batch("nacks", "error"),
    "SettleResults": _object(
        {"results": {"type": "array", "items": _SETTLE_ITEM_RESULT}}, ["results"]
    ),
}

"""The API's operations for OpenAPI, written out one by one: parameters, bodies and answers."""

from __future__ import annotations

from typing import Any

from broker.api.schema_components import Schema, ref
from broker.exceptions import LeaseMismatch, NotInDeadLetterQueue, TaskNotFound, TaskNotHeld
from contract.limits import (
    DEFAULT_LEASE_MS,
    DEFAULT_PAGE_SIZE,
    DEFAULT_WAIT_MS,
    MAX_LEASE_MS,
    MAX_PAGE_SIZE,
    MAX_WAIT_MS,
    MIN_LEASE_MS,
    TASK_ID_PATTERN,
)

OPEN_OPERATIONS = {"health"}
TAG_ORDER = (
    "jobs", "batch", "workflows", "events", "dead-letter queue", "queues", "schedules", "types",
    "observability",
)  # fmt: skip


def answer(description: str, schema: Schema | None = None, **headers: Schema) -> Schema:
    answer: Schema = {"description": description}
    if schema is not None:
        answer["content"] = {"application/json": {"schema": schema}}
    if headers:
        answer["headers"] = headers
    return answer


def error_answer(description: str) -> Schema:
    return answer(description, ref("Error"))


def _query(name: str, schema: Schema, description: str, **extra: Any) -> Schema:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
        **extra,
    }


def _integer(name: str, minimum: int, default: int, description: str) -> Schema:
    return _query(name, {"type": "integer", "minimum": minimum, "default": default}, description)


def _body(schema: Schema, *, required: bool) -> Schema:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


TASK_ID = {
    "name": "task_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": TASK_ID_PATTERN},
    "description": "Task id as the broker gave it out; any other string is a 404.",
}
LEASE_ID = _query("lease_id", {"type": "string"}, "The lease; or `lease_id` in the body.")
WAIT_MS = _integer(
    "wait_ms",
    0,
    DEFAULT_WAIT_MS,
    f"How long to wait for a task; above {MAX_WAIT_MS} counts as {MAX_WAIT_MS}; 0 answers at once.",
)
LEASE_MS = _integer(
    "lease_ms",
    MIN_LEASE_MS,
    DEFAULT_LEASE_MS,
    f"Lease length; above {MAX_LEASE_MS} counts as {MAX_LEASE_MS}.",
)
CLAIM_QUEUES = _query(
    "queue",
    {"type": "array", "items": ref("QueueName"), "minItems": 1},
    "Comma-separated queues to claim from; every queue when absent (given empty: 400).",
    style="form",
    explode=False,
)
LIMIT = _integer(
    "limit", 1, DEFAULT_PAGE_SIZE, f"Page size; above {MAX_PAGE_SIZE} counts as {MAX_PAGE_SIZE}."
)
CURSOR = _query(
    "cursor",
    {"type": "string", "pattern": TASK_ID_PATTERN},
    "Where the page starts: as found in the previous page's `next`.",
)
STATE = _query("state", ref("State"), "Only tasks in this state.")
QUEUE = _query("queue", ref("QueueName"), "Only tasks of this queue.")
# A filter given empty is a 400 (parsing.query_text), not "no filter".
TYPE = _query("type", {"type": "string", "minLength": 1}, "Only tasks of this job type.")
KEY = _query("key", {"type": "string", "minLength": 1, "maxLength": 128}, "Only tasks of this key.")
UNIQUE_KEY = _query(
    "unique_key", {"type": "string", "minLength": 1, "maxLength": 255}, "Only tasks of this key."
)
WORKFLOW = _query(
    "workflow", {"type": "string", "pattern": TASK_ID_PATTERN}, "Only the steps of this workflow."
)

BAD_REQUEST = error_answer("A parameter or the body is invalid; `fields` names each offender.")
# The sentences the errors themselves carry (broker/exceptions.py).
NOT_HELD = error_answer(TaskNotHeld().message)
OTHER_LEASE = error_answer(LeaseMismatch().message)
NO_TASK = error_answer(TaskNotFound().message)
LOCATION = {"description": "`/jobs/{id}` of the task.", "schema": {"type": "string"}}


def _op(op_id: str, summary: str, tag: str, responses: dict[int, Schema], **rest: Any) -> Schema:
    return {
        "operationId": op_id,
        "summary": summary,
        "tags": [tag],
        **rest,
        "responses": {str(code): answer for code, answer in responses.items()},
    }


def _settle(op_id: str, verb: str, request: str) -> Schema:
    return _op(
        op_id,
        f"{verb} one leased task",
        "jobs",
        {204: answer(f"{verb}ed."), 400: BAD_REQUEST, 404: NOT_HELD, 409: OTHER_LEASE},
        parameters=[TASK_ID, LEASE_ID],
        requestBody=_body(ref(request), required=False),
    )


def _settle_batch(op_id: str, verb: str, request: str) -> Schema:
    return _op(
        op_id,
        f"{verb} many leased tasks in one transaction",
        "batch",
        {
            200: answer("Each item answered as its single call would be.", ref("SettleResults")),
            400: BAD_REQUEST,
        },
        requestBody=_body(ref(request), required=True),
    )


_LIST_PAGE = answer("Newest first.", ref("TaskPage"))

OPERATIONS: dict[str, dict[str, Schema]] = {
    "broker.api.views.JobsView": {
        "post": _op(
            "enqueue",
            "Enqueue a task",
            "jobs",
            {
                201: answer("Created.", ref("Enqueued"), Location=LOCATION),
                200: answer(
                    "The idempotency key is kept (the first task's id), or the unique key is "
                    "held (the holder's id, deduplicated): nothing created.",
                    ref("Enqueued"),
                    Location=LOCATION,
                ),
                400: BAD_REQUEST,
            },
            requestBody=_body(ref("EnqueueRequest"), required=True),
        ),
        "get": _op(
            "list_jobs",
            "List tasks",
            "jobs",
            {200: _LIST_PAGE, 400: BAD_REQUEST},
            parameters=[STATE, QUEUE, TYPE, KEY, UNIQUE_KEY, WORKFLOW, LIMIT, CURSOR],
        ),
    },
    "broker.api.views.ClaimView": {
        "get": _op(
            "claim",
            "Claim one task (long-poll)",
            "jobs",
            {
                200: answer("A task, under a new lease.", ref("Delivery")),
                204: answer("The wait elapsed with nothing to claim."),
                400: BAD_REQUEST,
            },
            parameters=[WAIT_MS, LEASE_MS, CLAIM_QUEUES],
        ),
    },
    "broker.api.views.TaskView": {
        "get": _op(
            "get_job",
            "One task, and why it is waiting",
            "jobs",
            {
                200: answer(
                    "The task; `waiting` is null unless it is ready or delayed.", ref("OneTask")
                ),
                404: NO_TASK,
            },
            parameters=[TASK_ID],
        ),
        "delete": _op(
            "cancel_job",
            "Cancel a ready, delayed or handed-out task",
            "jobs",
            {
                204: answer("Cancelled."),
                404: NO_TASK,
                409: error_answer("Already done, dead or cancelled."),
            },
            parameters=[TASK_ID],
        ),
    },
    "broker.api.views.AckView": {"post": _settle("ack", "Ack", "AckRequest")},
    "broker.api.views.NackView": {"post": _settle("nack", "Nack", "NackRequest")},
    "broker.api.views.ExtendView": {
        "post": _op(
            "extend",
            "Extend a lease (heartbeat)",
            "jobs",
            {
                200: answer("The new deadline.", ref("Deadline")),
                400: BAD_REQUEST,
                404: NOT_HELD,
                409: OTHER_LEASE,
            },
            parameters=[TASK_ID, LEASE_ID, LEASE_MS],
            requestBody=_body(ref("ExtendRequest"), required=False),
        ),
    },
    "broker.api.views.ProgressView": {
        "post": _op(
            "progress",
            "Report progress and a checkpoint on a held task",
            "jobs",
            {
                200: answer("The lease's deadline (moved only with lease_ms).", ref("Deadline")),
                400: BAD_REQUEST,
                404: NOT_HELD,
                409: OTHER_LEASE,
            },
            parameters=[
                TASK_ID,
                LEASE_ID,
                _query(
                    "lease_ms",
                    {"type": "integer", "minimum": MIN_LEASE_MS},
                    f"Also extend the lease to now + lease_ms; above {MAX_LEASE_MS} counts as "
                    f"{MAX_LEASE_MS}.",
                ),
            ],
            requestBody=_body(ref("ProgressRequest"), required=True),
        ),
    },
    "broker.api.views.StatsView": {
        "get": _op(
            "stats",
            "Gauges and lifetime counters",
            "observability",
            {200: answer("Tasks per live state now, and the lifetime totals.", ref("Stats"))},
        ),
    },
    "broker.api.views.DeadLetterView": {
        "get": _op(
            "list_dlq",
            "List the dead-letter queue",
            "dead-letter queue",
            {200: _LIST_PAGE, 400: BAD_REQUEST},
            parameters=[QUEUE, TYPE, LIMIT, CURSOR],
        ),
    },
    "broker.api.views.RequeueView": {
        "post": _op(
            "requeue",
            "Requeue a dead task",
            "dead-letter queue",
            {
                204: answer("Ready again, attempts reset."),
                404: error_answer(NotInDeadLetterQueue().message),
            },
            parameters=[TASK_ID],
        ),
    },
    "broker.api.views.HealthView": {
        "get": _op(
            "health",
            "Liveness and database reachability",
            "observability",
            {
                200: answer("Up.", ref("Health")),
                503: error_answer("The database cannot be reached (adds `status`)."),
            },
        ),
    },
    "broker.metrics.MetricsView": {
        "get": _op(
            "metrics",
            "Prometheus metrics",
            "observability",
            {
                200: {
                    "description": "Prometheus text format 0.0.4, read from the database: the "
                    "same from every process; counters equal the /stats totals.",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                }
            },
        ),
    },
    "broker.api.batch.EnqueueBatchView": {
        "post": _op(
            "enqueue_batch",
            "Enqueue many tasks, all or nothing",
            "batch",
            {
                201: answer("Created, ids in order.", ref("EnqueuedBatch")),
                400: error_answer(
                    "A bad item; `fields` names it by index (`jobs.3.max_attempts`)."
                ),
            },
            requestBody=_body(ref("EnqueueBatchRequest"), required=True),
        ),
    },
    "broker.api.batch.ClaimBatchView": {
        "post": _op(
            "claim_batch",
            "Claim up to `max` tasks (long-poll)",
            "batch",
            {
                200: answer(
                    "1 to `max` deliveries; with `acks` or `nacks` given, each item's answer "
                    "(as POST /jobs/ack or /nack gives it) and 0 to `max` deliveries.",
                    {"anyOf": [ref("Deliveries"), ref("SettledAndDeliveries")]},
                ),
                204: answer("The wait elapsed with nothing to claim (no `acks` or `nacks` given)."),
                400: BAD_REQUEST,
            },
            requestBody=_body(ref("ClaimRequest"), required=False),
        ),
    },
    "broker.api.batch.AckBatchView": {"post": _settle_batch("ack_batch", "Ack", "AckBatchRequest")},
    "broker.api.batch.NackBatchView": {
        "post": _settle_batch("nack_batch", "Nack", "NackBatchRequest"),
    },
}

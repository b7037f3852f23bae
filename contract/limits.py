"""Every limit and default of API.md, written once; the parser, the schema and the docs read it."""

from __future__ import annotations

import re
from typing import Any

# -- POST /jobs ---------------------------------------------------------------------------------

MIN_ATTEMPTS = 1
MAX_ATTEMPTS = 100
DEFAULT_MAX_ATTEMPTS = 3
MAX_DELAY_DAYS = 7
MAX_DELAY_MS = MAX_DELAY_DAYS * 24 * 3600 * 1000
DEFAULT_DELAY_MS = 0
DEFAULT_QUEUE = "default"
# Claim order, first to last; the broker stores them as 0, 1, 2 (broker.states.Priority).
PRIORITIES = ("high", "normal", "low")
DEFAULT_PRIORITY = "normal"
MAX_TYPE_NAME = 64
MAX_IDEMPOTENCY_KEY = 255
# The body is the first level: payloads and results nest at most MAX_JSON_DEPTH - 1 deep.
MAX_JSON_DEPTH = 256

# -- queue names --------------------------------------------------------------------------------

MAX_QUEUE_NAME = 64
QUEUE_RULE = f"[A-Za-z0-9_.-]{{1,{MAX_QUEUE_NAME}}}"
# Anchored for OpenAPI and DRF; in Python use QUEUE_RE.fullmatch: "$" also matches before a
# final "\n", so "a\n" would pass a plain match.
QUEUE_PATTERN = f"^{QUEUE_RULE}$"
QUEUE_RE = re.compile(QUEUE_RULE)
QUEUE_MESSAGE = f"Must match {QUEUE_RULE}."
# A claim's list of queues given empty: left out, it means every queue; empty, it is refused.
NO_QUEUES = "Name at least one queue, or leave it out to claim from every queue."

# -- request bodies ------------------------------------------------------------------------------

DEFAULT_MAX_BODY_BYTES = 262_144  # BROKER_MAX_BODY_BYTES' default: bodies over it get 413
# POST /sqs takes a full-size SQS message (1 MiB with its attributes) whatever
# BROKER_MAX_BODY_BYTES says. SDKs write JSON with \uXXXX escapes for every non-ASCII character
# (botocore does): six bytes for a two-byte character, so the message's request may be 3 MiB.
SQS_MAX_REQUEST_BYTES = 3 * 1_048_576 + 65_536

# -- claims, leases, batches, pages -------------------------------------------------------------

DEFAULT_WAIT_MS = 20_000
MAX_WAIT_MS = 30_000
DEFAULT_LEASE_MS = 30_000
MIN_LEASE_MS = 1
MAX_LEASE_MS = 300_000
MAX_BATCH = 1000  # items of one batch call, or acks + nacks of one settle-and-claim
MAX_CLAIM = 100
# After a sweeper loses the database, leases that ran out since its last sweep are not reclaimed
# until this long after it is back (BROKER_OUTAGE_GRACE_MS): their workers could not settle them
# meanwhile. Workers retry a settle or extend answered 503 for at least this long after.
OUTAGE_GRACE_MS = 15_000
DEFAULT_CLAIM = 1
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
# An answer's size: a claim stops adding deliveries, and a list page items, once its answer
# passes this (each carries at least one); what a list page leaves out, its `next` goes on from.
MAX_ANSWER_BYTES = 8 * 1_048_576
# Characters of an error a list page shows (GET /jobs, /dlq, a workflow's steps); GET /jobs/{id}
# shows more (broker/api/listing.py).
LISTED_ERROR_CHARS = 1024

# -- progress reports (POST /jobs/{id}/progress) ------------------------------------------------

MAX_PROGRESS_MESSAGE = 1000  # characters
MAX_CHECKPOINT_BYTES = 65_536  # the checkpoint as compact UTF-8 JSON

# -- history (GET /stats/history) ---------------------------------------------------------------

HISTORY_STEPS = (60, 3600)  # seconds: one-minute and hourly points
DEFAULT_HISTORY_STEP = 60
DEFAULT_HISTORY_RANGE_S = 3600  # without `since`: the last hour

# -- queue settings and schedules ---------------------------------------------------------------

MAX_IN_FLIGHT = 1_000_000
MAX_RATE_PER_S = 1_000_000
MAX_SCHEDULE_NAME = 64
SCHEDULE_NAME_RULE = f"[A-Za-z0-9_.-]{{1,{MAX_SCHEDULE_NAME}}}"
SCHEDULE_NAME_RE = re.compile(SCHEDULE_NAME_RULE)
MAX_EVERY_S = 366 * 24 * 3600
DEFAULT_MAX_SCHEDULES = 10_000  # BROKER_MAX_SCHEDULES' default: how many schedules may exist
MAX_CRON = 255
# The longest IANA zone name is 32 characters (America/Argentina/ComodRivadavia).
MAX_TIMEZONE = 64
# Dependencies and workflows (API.md "Dependencies", "Workflows").
MAX_KEY = 128  # a task's key (a tenant's, customer's or entity's id)
MAX_AFTER = 100  # tasks one task may wait for
AFTER_POLICIES = ("done", "finished")
DEFAULT_AFTER_POLICY = "done"
MAX_WORKFLOW_STEPS = 1000
MAX_WORKFLOW_NAME = 200
REF_RULE = "[A-Za-z0-9_.-]{1,64}"
REF_RE = re.compile(REF_RULE)
# Unique tasks (API.md "Unique tasks, debounce and throttle").
MAX_UNIQUE_KEY = 255
UNIQUE_UNTIL = ("finished", "started", "period")
DEFAULT_UNIQUE_UNTIL = "finished"
UNIQUE_ON_CONFLICT = ("skip", "replace")
DEFAULT_UNIQUE_ON_CONFLICT = "skip"
MAX_UNIQUE_PERIOD_S = 7 * 24 * 3600
MAX_DEBOUNCE_MS = MAX_DELAY_MS
MAX_DEBOUNCE_MAX_MS = 30 * 24 * 3600 * 1000
# Waiting for events (API.md "Waiting for events, and approvals").
MAX_EVENT_NAME = 200
MAX_EVENT_KEY = 255
MAX_EVENT_DATA_BYTES = 65_536  # an event's data as compact UTF-8 JSON
MAX_WAIT_TIMEOUT_MS = 30 * 24 * 3600 * 1000
ON_TIMEOUT = ("cancel", "run")
DEFAULT_ON_TIMEOUT = "cancel"
APPROVAL_EVENT = "approval"
# How recent a claim request must be for a queue to count as having workers (`no_workers`).
WORKERS_SEEN_S = 60

# -- job types of your own (PUT /types/{name}) ---------------------------------------------------

TYPE_NAME_RULE = f"[a-z][a-z0-9_.-]{{0,{MAX_TYPE_NAME - 1}}}"
TYPE_NAME_RE = re.compile(TYPE_NAME_RULE)
TYPE_NAME_MESSAGE = f"Must match {TYPE_NAME_RULE}."
MAX_TYPE_DESCRIPTION = 1000  # characters
# A registered schema nests at most this deep: checking it against the meta-schema recurses.
MAX_SCHEMA_DEPTH = 64

# -- task ids -----------------------------------------------------------------------------------

# Decimal strings of a bigint key, as the broker gives them out: no sign, no leading zero.
TASK_ID_PATTERN = "^(0|[1-9][0-9]{0,17})$"
_TASK_ID_RE = re.compile(TASK_ID_PATTERN)


def whole_number(text: str) -> int | None:
    """ASCII digits → their value, None for anything else. Past 18 digits, past every limit here,
    the value is 10**18: int() refuses strings of over 4300 digits, and none is needed."""
    if not (text.isdigit() and text.isascii()):
        return None
    digits = text.lstrip("0")
    return int(digits or "0") if len(digits) <= 18 else 10**18


def parse_task_id(raw: Any) -> int | None:
    """A task id as given out → the row's key; None when it cannot be one (say, "007" or "٣")."""
    if isinstance(raw, str) and _TASK_ID_RE.fullmatch(raw):
        return int(raw)
    return None


def nests_at_most(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether `value` nests arrays and objects at most `limit` deep; iterative, no recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


# What docs/limits.md states, in its order: (name, value, where it applies).
def _applies(where: str, *rows: tuple[str, str]) -> tuple[tuple[str, str, str], ...]:
    return tuple((name, value, where) for name, value in rows)


DOCUMENTED: tuple[tuple[str, Any, str], ...] = (
    *_applies(
        "`POST /jobs`",
        ("max_attempts", f"{MIN_ATTEMPTS} to {MAX_ATTEMPTS}, default {DEFAULT_MAX_ATTEMPTS}"),
        ("delay_ms", f"0 to {MAX_DELAY_MS} ({MAX_DELAY_DAYS} days), default {DEFAULT_DELAY_MS}"),
        ("priority", f"{', '.join(PRIORITIES)}; default {DEFAULT_PRIORITY}"),
        ("type", f"a registered job type, at most {MAX_TYPE_NAME} characters"),
        ("idempotency_key", f"at most {MAX_IDEMPOTENCY_KEY} characters"),
        ("key", f"1 to {MAX_KEY} characters, no U+0000, or null"),
        ("after", f"1 to {MAX_AFTER} distinct ids of existing tasks"),
        ("after_policy", f"{', '.join(AFTER_POLICIES)}; default {DEFAULT_AFTER_POLICY}"),
        ("unique.key", f"1 to {MAX_UNIQUE_KEY} characters, no U+0000"),
        ("unique.until", f"{', '.join(UNIQUE_UNTIL)}; default {DEFAULT_UNIQUE_UNTIL}"),
        ("unique.period_s", f"1 to {MAX_UNIQUE_PERIOD_S} (7 days); required with period only"),
        (
            "unique.on_conflict",
            f"{', '.join(UNIQUE_ON_CONFLICT)}; default {DEFAULT_UNIQUE_ON_CONFLICT}",
        ),
        ("unique.debounce_ms", f"0 to {MAX_DEBOUNCE_MS} (7 days); not with delay_ms"),
        ("unique.debounce_max_ms", f"1 to {MAX_DEBOUNCE_MAX_MS} (30 days); needs debounce_ms"),
    ),
    ("queue", f"`{QUEUE_RULE}`, default `{DEFAULT_QUEUE}`", "`POST /jobs`, claims, lists"),
    ("JSON depth", f"payloads and results nest at most {MAX_JSON_DEPTH - 1} levels", "every body"),
    ("wait_ms", f"default {DEFAULT_WAIT_MS}, capped at {MAX_WAIT_MS}", "claims"),
    (
        "lease_ms",
        f"default {DEFAULT_LEASE_MS}, at least {MIN_LEASE_MS}, capped at {MAX_LEASE_MS}",
        "claims, extend",
    ),
    ("max", f"1 to {MAX_CLAIM}, default {DEFAULT_CLAIM}", "`POST /jobs/claim`"),
    (
        "answer size",
        f"no item is added once the answer passes {MAX_ANSWER_BYTES} bytes (8 MiB); at least one",
        "claims, `GET /jobs`, `GET /dlq`",
    ),
    (
        "listed error",
        f"each error cut to {LISTED_ERROR_CHARS} characters",
        "`GET /jobs`, `GET /dlq`, `GET /workflows/{id}` steps",
    ),
    *_applies(
        "`POST /jobs/{id}/progress`",
        ("fraction", "a number from 0 to 1, or null"),
        ("message", f"at most {MAX_PROGRESS_MESSAGE} characters, or null"),
        ("checkpoint", f"any JSON, at most {MAX_CHECKPOINT_BYTES} bytes as compact UTF-8 JSON"),
    ),
    (
        "step",
        " or ".join(str(s) for s in HISTORY_STEPS) + f" seconds, default {DEFAULT_HISTORY_STEP}",
        "`GET /stats/history`",
    ),
    (
        "batch items",
        f"1 to {MAX_BATCH}",
        "`POST /jobs/batch`, `/jobs/ack`, `/jobs/nack`, settles in a claim",
    ),
    (
        "limit",
        f"default {DEFAULT_PAGE_SIZE}, capped at {MAX_PAGE_SIZE}",
        "`GET /jobs`, `/dlq`, `/queues`",
    ),
    ("task id", f"`{TASK_ID_PATTERN}`; anything else is a 404", "paths, cursors"),
    *_applies(
        "`PATCH /queues/{name}`",
        ("max_in_flight", f"1 to {MAX_IN_FLIGHT}, or null (no cap)"),
        ("key_max_in_flight", f"1 to {MAX_IN_FLIGHT}, or null (no cap)"),
        ("rate_per_s", f"a number above 0, at most {MAX_RATE_PER_S}, or null (no limit)"),
    ),
    *_applies(
        "`POST /workflows`",
        ("steps", f"1 to {MAX_WORKFLOW_STEPS}"),
        ("workflow name", f"1 to {MAX_WORKFLOW_NAME} characters"),
        ("ref", f"`{REF_RULE}`, unique in the workflow"),
    ),
    *_applies(
        "`PUT /types/{name}`",
        ("type name", f"`{TYPE_NAME_RULE}`; not a built-in type's"),
        ("description", f"at most {MAX_TYPE_DESCRIPTION} characters"),
        (
            "schema",
            f"a JSON Schema (draft 2020-12) or null, nesting at most {MAX_SCHEMA_DEPTH} deep",
        ),
    ),
    *_applies(
        "`POST /schedules`",
        ("schedule name", f"`{SCHEDULE_NAME_RULE}`"),
        ("every_s", f"1 to {MAX_EVERY_S} (366 days)"),
        ("cron", f"5 fields, at most {MAX_CRON} characters, in `timezone` (default UTC)"),
    ),
)


def markdown_table() -> str:
    """DOCUMENTED as the Markdown table docs/limits.md holds (a test keeps the two equal)."""
    rows = ["| limit | value | where |", "|---|---|---|"]
    # A "|" in a cell would end it, even inside backticks.
    rows += [
        f"| `{name}` | {str(value).replace('|', chr(92) + '|')} | {where} |"
        for name, value, where in DOCUMENTED
    ]
    return "\n".join(rows) + "\n"

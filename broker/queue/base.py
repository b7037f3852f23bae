"""What the queue's verbs take and give, and the rules for text they store."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from broker.exceptions import BrokerError
from broker.models import COUNTER_SHARDS
from broker.states import backoff_ms
from contract.conf import broker_settings

LEASE_EXPIRED = "lease expired"
NO_ERROR_GIVEN = "nacked without an error message"
# An error is kept up to this many characters (its start: a django task's error names the
# exception's class on its first line), however long the worker's report; with the history bounded
# on requeue, a task's errors stay bounded. Answers cut them shorter still (api/listing.py).
MAX_KEPT_ERROR_CHARS = 65_536
TRUNCATED = " [truncated]"
# Errors kept per task once it is requeued (attempts start again from 0, so the history would grow
# by up to max_attempts errors per round), or while it has unlimited attempts: the newest.
MAX_KEPT_ERRORS = 100


@dataclass(frozen=True, slots=True)
class QueuePatterns:
    """A claim's scope given as patterns, not names (an access token's grants, broker.tokens):
    regular expressions over queue names, resolved against the queues with ready tasks."""

    globs: tuple[str, ...]  # as granted: `*` and `?` (fnmatch)
    regexes: tuple[str, ...]  # the same as regular expressions, for the database


@dataclass(frozen=True, slots=True)
class Unique:
    """An enqueue's `unique`: at most one task of its queue holds `key` while `until` says so
    (broker.queue.unique)."""

    key: str
    until: str = "finished"  # or "started", "period"
    period_s: int | None = None  # with "period" only
    on_conflict: str = "skip"  # or "replace"
    debounce_ms: int | None = None
    debounce_max_ms: int | None = None


@dataclass(frozen=True, slots=True)
class WaitFor:
    """An enqueue's or a suspend's `wait_for`: blocked until the event `event` with `key` is
    received at or after `since` (None: any kept), or until `timeout_ms` has passed (None:
    for ever), when `on_timeout` says what happens (broker.queue.events)."""

    event: str
    key: str
    since: datetime | None = None
    timeout_ms: int | None = None
    on_timeout: str = "cancel"  # or "run"


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What an enqueue did: a new task (created), or the id of the task that already holds the
    request's idempotency key or unique key; `replaced`: its payload became the request's."""

    pk: int
    created: bool
    deduplicated: bool = False
    replaced: bool = False


@dataclass(frozen=True, slots=True)
class NewTask:
    """What an enqueue asks for, already validated."""

    payload: str  # JSON text
    max_attempts: int | None = 3  # None: unlimited
    delay_ms: int = 0
    queue: str = "default"
    priority: int = 1
    type: str | None = None
    idempotency_key: str | None = None
    backoff: bool = True  # False: a failed attempt is retried at once (SQS messages)
    after: tuple[int, ...] = ()  # tasks to wait for (broker.queue.dependencies)
    after_policy: str = "done"  # or "finished"
    key: str | None = None  # a tenant's or entity's id (broker.queue.keys)
    # broker.enqueue's run_after: the time itself (delay_ms, read off an earlier clock, is only
    # what was validated), so the task is ready at it, not milliseconds after.
    not_before: datetime | None = None
    enqueued_by: str | None = None  # the access token's name (broker.tokens)
    unique: Unique | None = None  # at most one task per key (broker.queue.unique)
    wait_for: WaitFor | None = None  # blocked until an event (broker.queue.events)


@dataclass(frozen=True, slots=True)
class ClaimedTask:
    """The fields of a task a claim hands out (a plain record: no model on the hot path).

    Its times are already API text (see api_time): PostgreSQL writes them in the claim itself.
    """

    pk: int
    payload: str  # JSON text, as stored
    attempts: int
    max_attempts: int | None
    queue: str
    priority: int
    type: str | None
    created_at: str
    available_at: str
    after_policy: str | None = None  # not None: it waited for others (`after`)
    checkpoint: str | None = None  # JSON text: the last checkpoint its holders reported
    key: str | None = None
    workflow_id: int | None = None
    ref: str | None = None
    event: str | None = None  # JSON text: the event that released it (broker.queue.events)


@dataclass(frozen=True, slots=True)
class Delivery:
    """A claimed task and the lease it is held under; `parents`: what it waited for, in `after`
    order (dependencies.Parent: id, state, result)."""

    task: ClaimedTask
    lease_id: str
    deadline: datetime
    parents: tuple[Any, ...] = ()


# The answer for one item of a batch settle: None when it settled, else the error its single
# call would have raised (its class carries the status and the sentence).
Outcome = type[BrokerError] | None
Settle = tuple[int | None, str, Any]  # (task id or None when it cannot exist, lease id, extra)


def api_time(value: datetime | None) -> str | None:
    """RFC 3339, UTC, milliseconds (truncated): 2026-11-29T11:28:36.123Z."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# api_time in SQL, for PostgreSQL to write in the statement that reads the time.
API_TIME_SQL = "to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"


def current_time() -> datetime:
    """The state machine's clock (tests move it by patching `timezone` here)."""
    return timezone.now()


def storable(text: str) -> str:
    """Text a PostgreSQL text column takes: U+0000 and lone surrogates (JSON can carry both)
    become U+FFFD. A lease id so changed still matches no lease, as it did not before."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def kept_error(error: str | None) -> str:
    """A nack's error as stored: storable, at most MAX_KEPT_ERROR_CHARS (its start kept)."""
    if not error:
        return NO_ERROR_GIVEN
    if len(error) > MAX_KEPT_ERROR_CHARS:
        error = error[: MAX_KEPT_ERROR_CHARS - len(TRUNCATED)] + TRUNCATED
    return storable(error)


def retries_left(attempts: int, max_attempts: int | None) -> bool:
    """Whether a task that failed its `attempts`-th attempt is tried again (None: unlimited)."""
    return max_attempts is None or attempts < max_attempts


def retry_delay(attempts: int, jitter: float | None = None) -> timedelta:
    """The backoff before the retry after the `attempts`-th failure (jitter in [0, 1))."""
    rng = random if jitter is None else _Fixed(jitter)
    ms = backoff_ms(
        attempts, broker_settings.BROKER_RETRY_BASE_MS, broker_settings.BROKER_RETRY_MAX_MS, rng
    )
    return timedelta(milliseconds=ms)


class _Fixed:
    """A uniform(a, b) that lands where `jitter` says: the same draw the SQL backoff uses."""

    def __init__(self, jitter: float) -> None:
        self.jitter = jitter

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.jitter


def aware(value: Any) -> datetime | None:
    """A datetime column read by raw SQL: SQLite hands back text, PostgreSQL an aware value."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)  # Django keeps SQLite datetimes as naive UTC
    return value


def shard() -> int:
    """A counter shard for this move: spreads row locks, not a secret."""
    return random.randrange(COUNTER_SHARDS)  # noqa: S311

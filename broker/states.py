"""Task states, the transition table and retry backoff: pure, no queries, no settings."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, ClassVar, Self

from django.db import models

from contract.backoff import backoff_ms

if TYPE_CHECKING:
    # Django ships no type information (and django-stubs is not a dependency), so to mypy
    # models.TextChoices is Any and State.READY would read as the ("ready", "ready") tuple it is
    # written as. These bases say what Django's ChoicesType makes of a member: an enum whose value
    # is the first item and whose label is the second. The __new__ is StrEnum's and IntEnum's own
    # signature; declaring it here tells mypy that members are built by a __new__ (the metaclass
    # splits off the label first), so it takes .value from _value_ rather than the tuple literal.
    class _Labelled:
        @property
        def label(self) -> str: ...

    class _TextChoices(_Labelled, enum.StrEnum):
        _value_: str
        choices: ClassVar[list[tuple[str, str]]]
        values: ClassVar[list[str]]

        def __new__(cls, value: str) -> Self: ...

    class _IntegerChoices(_Labelled, enum.IntEnum):
        _value_: int
        choices: ClassVar[list[tuple[int, str]]]
        values: ClassVar[list[int]]

        def __new__(cls, value: int) -> Self: ...

else:
    _TextChoices = models.TextChoices
    _IntegerChoices = models.IntegerChoices


class State(_TextChoices):
    """Where a task is; a task is always in exactly one state."""

    BLOCKED = "blocked", "blocked"
    """Waiting for the tasks it names in `after` to finish, or for an event (`wait_for`);
    released to ready or delayed."""
    READY = "ready", "ready"
    """Waiting to be claimed."""
    HANDED_OUT = "handed_out", "handed out"
    """Claimed by a worker under a lease, not yet acked or nacked."""
    DELAYED = "delayed", "delayed"
    """Waiting out delay_ms or a retry backoff; becomes ready at available_at."""
    DEAD = "dead", "dead"
    """Out of attempts: the dead-letter queue."""
    DONE = "done", "done"
    """Acked."""
    CANCELLED = "cancelled", "cancelled"
    """Cancelled through DELETE /jobs/{id}."""


GAUGE_STATES = (State.READY, State.HANDED_OUT, State.DELAYED, State.DEAD, State.BLOCKED)
FINISHED_STATES = (State.DONE, State.CANCELLED)

# Lifetime counters: name → what it counts. The counter rows, the SQL that moves them, /stats
# totals, the OpenAPI schema and /metrics are all built from this table: a new counter is one line
# here (and its use in TRANSITIONS), plus the migration that adds its column.
COUNTERS: dict[str, str] = {
    "enqueued": "Tasks enqueued.",
    "delivered": "Tasks handed out to a worker.",
    "acked": "Tasks acked.",
    "nacked": "Tasks nacked by a worker.",
    "reclaimed": "Leases that expired.",
    "retried": "Failures sent back for a retry.",
    "buried": "Tasks moved to the dead-letter queue.",
    "requeued": "Tasks requeued out of the dead-letter queue.",
    "cancelled": "Tasks cancelled.",
    "released": "Blocked tasks released to ready or delayed (what they waited for finished).",
    "deduplicated": "Enqueues answered by the holder of their unique key: nothing created.",
    "suspended": "Handed-out tasks that gave their lease back to wait for an event.",
    "events": "Events received (POST /events, approvals).",
}

# event: (from states, to state, counters moved). nack and reclaim fork on attempts left:
# the "retry" and "bury" halves each move their own counter as well.
TRANSITIONS: dict[str, tuple[frozenset[str], str, tuple[str, ...]]] = {
    "enqueue": (frozenset(), State.READY, ("enqueued",)),
    "enqueue_delayed": (frozenset(), State.DELAYED, ("enqueued",)),
    "enqueue_blocked": (frozenset(), State.BLOCKED, ("enqueued",)),
    # The last task a blocked one waits for finished: ready, or delayed for its delay_ms.
    "unblock": (frozenset({State.BLOCKED}), State.READY, ("released",)),
    "unblock_delayed": (frozenset({State.BLOCKED}), State.DELAYED, ("released",)),
    # The event a blocked task waits for came (POST /events), or its wait timed out with
    # on_timeout "run": ready, or delayed for its delay_ms; with `after` unfinished it stays
    # blocked (its blockers counted down, no move). broker.queue.events.
    "event": (frozenset({State.BLOCKED}), State.READY, ("released",)),
    "event_delayed": (frozenset({State.BLOCKED}), State.DELAYED, ("released",)),
    # A wait timed out with on_timeout "cancel" (the cancel cascade follows).
    "wait_timeout": (frozenset({State.BLOCKED}), State.CANCELLED, ("cancelled",)),
    # POST /jobs/{id}/wait: the holder gives its lease and its attempt back and waits for an
    # event; one already kept releases it at once (counted as suspended and released).
    "suspend": (frozenset({State.HANDED_OUT}), State.BLOCKED, ("suspended",)),
    "suspend_released": (frozenset({State.HANDED_OUT}), State.READY, ("suspended", "released")),
    "claim": (frozenset({State.READY}), State.HANDED_OUT, ("delivered",)),
    "ack": (frozenset({State.HANDED_OUT}), State.DONE, ("acked",)),
    "nack_retry": (frozenset({State.HANDED_OUT}), State.DELAYED, ("nacked", "retried")),
    "nack_bury": (frozenset({State.HANDED_OUT}), State.DEAD, ("nacked", "buried")),
    "reclaim_retry": (frozenset({State.HANDED_OUT}), State.DELAYED, ("reclaimed", "retried")),
    "reclaim_bury": (frozenset({State.HANDED_OUT}), State.DEAD, ("reclaimed", "buried")),
    "promote": (frozenset({State.DELAYED}), State.READY, ()),
    # A debounced enqueue (`unique.debounce_ms`) pushes the pending holder of its key: it waits
    # delayed until debounce_ms after that request, or is ready at once for a debounce of 0.
    # Only a task never handed out moves so (broker.queue.unique); the enqueue it absorbed
    # counts in "deduplicated", not here.
    "debounce": (frozenset({State.READY, State.DELAYED}), State.DELAYED, ()),
    "debounce_ready": (frozenset({State.READY, State.DELAYED}), State.READY, ()),
    # A failed attempt of a task without backoff (an SQS message: a lapsed visibility timeout, or
    # ChangeMessageVisibility to 0) is ready again at once; out of attempts it is "reclaim_bury".
    "release": (frozenset({State.HANDED_OUT}), State.READY, ("reclaimed", "retried")),
    # SQS's DeleteMessage with the latest receipt handle of a message whose visibility timeout
    # lapsed (or was set to 0) and that nobody has received since: it is deleted, as an ack; so
    # is one that lapse buried, its receives used up (a nack's bury and a requeue drop the lease).
    "ack_lapsed": (frozenset({State.READY, State.DELAYED, State.DEAD}), State.DONE, ("acked",)),
    "requeue": (frozenset({State.DEAD}), State.READY, ("requeued",)),
    # A person drops a task from the DLQ (admin's Discard): never retried; kept, cancelled, until
    # retention prunes it, as any cancelled task.
    "discard": (frozenset({State.DEAD}), State.CANCELLED, ("cancelled",)),
    "cancel": (
        frozenset({State.READY, State.DELAYED, State.HANDED_OUT, State.BLOCKED}),
        State.CANCELLED,
        ("cancelled",),
    ),
}


class Priority(_IntegerChoices):
    """Claim order: lower value first, so one ascending index serves the claim."""

    HIGH = 0, "high"
    NORMAL = 1, "normal"
    LOW = 2, "low"


PRIORITY_BY_NAME = {p.label: p.value for p in Priority}
PRIORITY_NAMES = {p.value: p.label for p in Priority}


# One rule for the broker's retries and the workers' reconnects (contract/backoff.py).
__all__ = ["backoff_ms"]

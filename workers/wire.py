"""What worker and broker exchange: task shapes, answers, errors, limits, the Broker protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, NotRequired, Protocol, TypedDict, Unpack

from contract.limits import DEFAULT_MAX_BODY_BYTES, MAX_CLAIM, MAX_LEASE_MS
from contract.limits import MAX_BATCH as MAX_SETTLES

__all__ = ["DEFAULT_MAX_BODY_BYTES", "MAX_CLAIM", "MAX_LEASE_MS", "MAX_SETTLES"]

# The longest error text sent with a nack: far below the broker's body limit.
MAX_ERROR_CHARS = 8000

# Per-item answers of a settle (ack or nack): the HTTP status the broker gave the item, or 0 when
# the broker could not be told before the lease ended (it reclaims the task by itself then).
SETTLED = 204
NOT_TOLD = 0
# An ack answered so was refused for its body (the result), not for its lease: nack it instead.
BODY_REFUSED = frozenset({400, 413})

Settle = tuple[str, str, Any]  # (task id, lease id, result of an ack or error text of a nack)
# A progress report: any of "fraction", "message", "checkpoint" (POST /jobs/{id}/progress).
Report = dict[str, Any]


class Task(TypedDict):
    """A task as the broker hands it out."""

    id: str
    payload: Any
    attempts: int
    max_attempts: int
    queue: str
    priority: str
    type: str | None
    created_at: str
    available_at: str
    checkpoint: NotRequired[Any]  # the last checkpoint reported, on a redelivery


class Delivery(TypedDict):
    """The answer to a claim: the task, and the lease it is held under."""

    task: Task
    lease_id: str
    deadline: str


class Claimed(NamedTuple):
    """A settle-and-claim's answer: a status per settle (acks, then nacks), then the deliveries."""

    statuses: list[int]
    deliveries: list[Delivery]


class BrokerError(Exception):
    """The broker gave an answer that retrying cannot fix (a 4xx other than the expected ones)."""

    def __init__(self, status: int, message: str, *, settled: Sequence[int] = ()) -> None:
        """status is the HTTP status, or 0 when the broker was never reached.

        settled: when a settle-and-claim's claim was refused, what became of its settles.
        """
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.settled = list(settled)


class BrokerUnavailableError(BrokerError):
    """The broker stayed unreachable or kept answering 5xx until we gave up."""


class ResultRefusedError(BrokerError):
    """The broker refused an ack for its result (400, or 413 over its body limit): nack instead."""


class ClaimArgs(TypedDict):
    """A claim's numbers, named at the call: three ints in a row are easy to swap."""

    max_n: int
    wait_ms: int
    lease_ms: int
    queues: NotRequired[Sequence[str]]


class Broker(Protocol):
    """What a worker needs from the broker; BrokerClient over HTTP, or a fake in tests."""

    def claim(self, wait_ms: int, lease_ms: int, queues: Sequence[str] = ()) -> Delivery | None:
        """Long-poll for a task; None when the wait elapsed or claims were cancelled."""
        ...

    def ack(self, task_id: str, lease_id: str, result: Any = None) -> bool:
        """Report success; False when the broker refused (404/409) or could not be told.

        Raises ResultRefusedError when the broker refused the result itself.
        """
        ...

    def nack(self, task_id: str, lease_id: str, error: str) -> bool:
        """Report failure; False when the broker refused (404/409) or could not be told."""
        ...

    def extend(self, task_id: str, lease_id: str, lease_ms: int) -> bool:
        """Push the lease deadline to now + lease_ms; False when the lease is lost or over."""
        ...

    def progress(
        self, task_id: str, lease_id: str, report: Report, lease_ms: int | None = None
    ) -> bool:
        """Report progress and a checkpoint (and extend the lease when lease_ms is given);
        False when the lease is lost or over."""
        ...

    def wait(self, task_id: str, lease_id: str, body: dict[str, Any]) -> bool:
        """POST /jobs/{id}/wait: suspend the held task until an event (body: the wait's fields
        and its checkpoint); False when the lease is lost or the broker refused it."""
        ...

    def cancel_claims(self, *, hard: bool = True) -> None:
        """Make parked and future claims return None at once (not hard: a claim being answered
        still gets its tasks); ack, nack, extend keep working."""
        ...

    def claim_many(
        self, max_n: int, wait_ms: int, lease_ms: int, queues: Sequence[str] = ()
    ) -> list[Delivery]:
        """Long-poll for up to max_n tasks; [] when the wait elapsed or claims were cancelled."""
        ...

    def settle(self, acks: Sequence[Settle], nacks: Sequence[Settle]) -> list[int]:
        """Ack and nack many; a status per item, acks then nacks (SETTLED when taken)."""
        ...

    def settle_and_claim(
        self, acks: Sequence[Settle], nacks: Sequence[Settle], **claim: Unpack[ClaimArgs]
    ) -> Claimed:
        """Settle, then claim up to max_n, in one round trip.

        Raises BrokerError (with .settled) when the broker refuses the claim.
        """
        ...

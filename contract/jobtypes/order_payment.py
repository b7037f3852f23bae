"""order_payment: an order that waits for its payment. The handler reserves the order, then
suspends until the event `payment` with the key `order-<order>` comes (POST /events), and
resumes with the event's data: a task that waits for the world without holding a worker."""

from __future__ import annotations

import secrets

from contract.fields import PayloadSchema, StrictInteger
from contract.jobtypes import JobSpec

MAX_ORDER = 10**12
# How long an order waits for its payment before it is cancelled: a day.
PAYMENT_TIMEOUT_MS = 86_400_000
EVENT = "payment"


def event_key(order: int) -> str:
    """The key of the payment event that releases the order's task."""
    return f"order-{order}"


class OrderPayload(PayloadSchema):
    order = StrictInteger(min_value=1, max_value=MAX_ORDER)


SPEC = JobSpec(
    name="order_payment",
    schema=OrderPayload,
    description=f"Reserves an order, then waits for the event {EVENT!r} with the key "
    "'order-<order>' (a day at most) and finishes with its data.",
    # A new order each time: a payment event is kept for days and would release an order of
    # the same number at once.
    sample=lambda broker_url: {"order": 100_000 + secrets.randbelow(900_000)},
)

"""order_payment's handler: the shape of a task that waits for an event mid-run. Its first
delivery reserves the order and suspends (job.wait_for_event: the lease and the attempt go back,
no worker is held); the payment's event brings it back with the event and the checkpoint."""

from __future__ import annotations

from typing import Any

from contract.jobtypes.order_payment import EVENT, PAYMENT_TIMEOUT_MS, SPEC, event_key
from workers import handler
from workers.job import Job


@handler(SPEC.name, schema=SPEC)
def run(payload: dict[str, Any], job: Job) -> dict[str, Any]:
    """Reserve, wait for the payment, then confirm with what the payment said."""
    order = payload["order"]
    if job.event is None:
        job.wait_for_event(
            EVENT,
            event_key(order),
            timeout_ms=PAYMENT_TIMEOUT_MS,
            checkpoint={"reserved": order},
        )
    return {
        "order": order,
        "paid": (job.event.get("data") or {}).get("amount"),
        "resumed_with": job.checkpoint,
    }

"""submit's samples: the payment event it sends for its sample order, the sample workflows (a
diamond; a review waiting for approval in admin) and the body of one typed task."""

from __future__ import annotations

import secrets
from typing import Any

from contract.jobtypes import SPECS
from workers.producer import body_template

# The data of the payment event submit sends for its sample order.
PAYMENT = {"amount": 4200, "currency": "EUR"}


def enqueue_body(
    name: str, payload: Any, *, priority: str, queue: str, max_attempts: int
) -> dict[str, Any]:
    """The POST /jobs body for one typed task."""
    shared = body_template(
        fail=False, max_attempts=max_attempts, delay_ms=0, queue=queue, priority=priority
    )
    return {**shared, "type": name, "payload": payload}


DIAMOND = "sample-diamond"


def diamond_steps(options: dict[str, Any]) -> list[dict[str, Any]]:
    """extract (data_transform) → left and right (merge_results, each reading extract's
    result) → load (merge_results, reading both): a fan-out and a fan-in."""
    sample = SPECS["data_transform"].sample("")

    def job(type_: str, payload: Any) -> dict[str, Any]:
        return enqueue_body(
            type_, payload, priority=options["priority"], queue=options["queue"],
            max_attempts=options["max_attempts"],
        )  # fmt: skip

    return [
        {"ref": "extract", "job": job("data_transform", sample)},
        {"ref": "left", "job": job("merge_results", {"label": "left"}), "after": ["extract"]},
        {"ref": "right", "job": job("merge_results", {"label": "right"}), "after": ["extract"]},
        {"ref": "load", "job": job("merge_results", {"label": "load"}),
         "after": ["left", "right"]},
    ]  # fmt: skip


APPROVAL = "sample-approval"


def approval_steps(options: dict[str, Any], broker: str) -> list[dict[str, Any]]:
    """draft (data_transform) → review (merge_results, released by the event `approval` that
    admin's Approve or Reject button posts) → publish (merge_results, reading the review)."""
    key = f"sample-{secrets.token_hex(4)}"  # a fresh key: a kept approval would release it

    def job(type_: str, payload: Any, **extra: Any) -> dict[str, Any]:
        return {**enqueue_body(type_, payload, priority=options["priority"],
                               queue=options["queue"], max_attempts=options["max_attempts"]),
                **extra}  # fmt: skip

    review = {"event": "approval", "key": key, "timeout_ms": options["timeout"] * 1000}
    return [
        {"ref": "draft", "job": job("data_transform", SPECS["data_transform"].sample(broker))},
        {"ref": "review", "job": job("merge_results", {"label": "review"}, wait_for=review),
         "after": ["draft"]},
        {"ref": "publish", "job": job("merge_results", {"label": "publish"}),
         "after": ["review"]},
    ]  # fmt: skip

"""Queue attributes: SetQueueAttributes/CreateQueue values checked, GetQueueAttributes answers."""

from __future__ import annotations

import json
import re
from typing import Any

from broker.models import SqsQueue
from broker.sqs import errors, limits
from contract.limits import whole_number

READ_ONLY = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
)
# SQS attributes with one value here, the broker's way, which tools that set up queues send as
# they are (name → (value, of FIFO queues only)): that value is accepted and reported, another
# refused. Deduplication ids are per queue and the throughput is the queue's; nothing is
# encrypted at rest by the broker (the database's disk may be).
FIXED = {
    "DeduplicationScope": ("queue", True),
    "FifoThroughputLimit": ("perQueue", True),
    "SqsManagedSseEnabled": ("false", False),
}
FIFO_ONLY = ("FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")
# What "All" reports, in this order (FIFO_ONLY: of a FIFO queue only).
REPORTED = (
    *limits.QUEUE_NUMBERS, "RedrivePolicy", *FIFO_ONLY, "SqsManagedSseEnabled", *READ_ONLY
)  # fmt: skip
# SQS's other attributes: refused when set (they would promise what the broker does not do),
# left out when asked for.
NOT_OFFERED = frozenset(
    {"Policy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "RedriveAllowPolicy"}
)
_INTEGER = re.compile(r"-?[0-9]{1,10}")


def settings_from(raw: dict[str, str], *, fifo: bool, creating: bool) -> dict[str, Any]:
    """SqsQueue field → value for the attributes of a CreateQueue or SetQueueAttributes of a
    standard or FIFO queue (a CreateQueue's FifoQueue is read by is_fifo, and checked here)."""
    fields: dict[str, Any] = {}
    for name, value in raw.items():
        if name in limits.QUEUE_NUMBERS:
            field, low, high, _ = limits.QUEUE_NUMBERS[name]
            if not _INTEGER.fullmatch(value) or not low <= int(value) <= high:
                raise errors.InvalidAttributeValue(
                    f"Invalid value for the parameter {name}. Reason: Must be an integer from "
                    f"{low} to {high}."
                )
            fields[field] = int(value)
        elif name == "RedrivePolicy":
            fields.update(redrive_policy(value))
        elif name == "FifoQueue" and creating:
            _flag(name, value)
        elif name == "ContentBasedDeduplication" and fifo:
            fields["content_based_dedup"] = _flag(name, value)
        elif name == "FifoQueue":
            raise errors.InvalidAttributeName(
                "Attribute FifoQueue can be set only when the queue is created."
            )
        elif name in FIXED and (fifo or not FIXED[name][1]):
            if value != FIXED[name][0]:
                raise errors.InvalidAttributeValue(
                    f"Invalid value for the parameter {name}. Reason: this broker offers "
                    f"{FIXED[name][0]!r} only (see docs/sqs.md)."
                )
        elif name in FIXED:
            raise errors.InvalidAttributeName(f"Attribute {name} is for FIFO queues only.")
        elif name in NOT_OFFERED:
            raise errors.InvalidAttributeName(
                f"Attribute {name} is not offered by this broker (see docs/sqs.md)."
            )
        else:
            raise errors.InvalidAttributeName(f"Unknown Attribute {name}.")
    return fields


def is_fifo(raw: dict[str, str]) -> bool:
    """Whether a CreateQueue's attributes ask for a FIFO queue (FifoQueue "true")."""
    return _flag("FifoQueue", raw.get("FifoQueue", "false"))


def _flag(name: str, value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise errors.InvalidAttributeValue(
            f"Invalid value for the parameter {name}. Reason: Must be true or false."
        )
    return value.lower() == "true"


def redrive_policy(value: str) -> dict[str, Any]:
    """RedrivePolicy's JSON → (max_receive_count, dead_letter_target_arn); "" removes it."""
    if value == "":
        return {"max_receive_count": None, "dead_letter_target_arn": ""}
    reason = None
    try:
        policy = json.loads(value)
    except (ValueError, RecursionError):  # nested past the parser's stack: not a map either
        policy = None
    if not isinstance(policy, dict) or set(policy) - {"maxReceiveCount", "deadLetterTargetArn"}:
        reason = "Redrive policy is not a JSON map of deadLetterTargetArn and maxReceiveCount."
        policy = {}
    count, arn = policy.get("maxReceiveCount"), policy.get("deadLetterTargetArn")
    if isinstance(count, str) and (number := whole_number(count)) is not None:
        count = number
    if not reason and (type(count) is not int or not 1 <= count <= limits.MAX_RECEIVE_COUNT):
        reason = (
            f"Value for maxReceiveCount must be an integer from 1 to {limits.MAX_RECEIVE_COUNT}."
        )
    if not reason and (not isinstance(arn, str) or not arn or len(arn) > 256):
        reason = "Value for deadLetterTargetArn must be an ARN."
    if reason:
        raise errors.InvalidAttributeValue(
            f"Value {value[:256]} for parameter RedrivePolicy is invalid. Reason: {reason}"
        )
    return {"max_receive_count": count, "dead_letter_target_arn": arn}


def wanted(names: list[str]) -> list[str]:
    """The attribute names a GetQueueAttributes asks for, "All" expanded; unknown names refused."""
    found: list[str] = []
    for name in names:
        if name == "All":
            found += REPORTED
        elif name in REPORTED:
            found.append(name)
        elif name not in NOT_OFFERED:
            raise errors.InvalidAttributeName(f"Unknown Attribute {name}.")
    return list(dict.fromkeys(found))


def report(queue: SqsQueue, names: list[str], gauges: dict[str, int]) -> dict[str, str]:
    """The attributes `names` (already `wanted`) of a queue; its gauges are per-state counts."""
    values: dict[str, str] = {
        "ApproximateNumberOfMessages": str(gauges.get("ready", 0)),
        "ApproximateNumberOfMessagesNotVisible": str(gauges.get("handed_out", 0)),
        "ApproximateNumberOfMessagesDelayed": str(gauges.get("delayed", 0)),
        "CreatedTimestamp": str(int(queue.created_at.timestamp())),
        "LastModifiedTimestamp": str(int(queue.updated_at.timestamp())),
        "QueueArn": limits.ARN_PREFIX + queue.name,
    }
    for name, (field, *_) in limits.QUEUE_NUMBERS.items():
        values[name] = str(getattr(queue, field))
    if queue.max_receive_count is not None:
        policy = {
            "deadLetterTargetArn": queue.dead_letter_target_arn,
            "maxReceiveCount": queue.max_receive_count,
        }
        values["RedrivePolicy"] = json.dumps(policy, separators=(",", ":"))
    if queue.fifo:
        values["FifoQueue"] = "true"
        values["ContentBasedDeduplication"] = str(queue.content_based_dedup).lower()
    for name, (value, fifo_only) in FIXED.items():
        if queue.fifo or not fifo_only:
            values[name] = value
    return {name: values[name] for name in names if name in values}


def differing(queue: SqsQueue, fields: dict[str, Any]) -> str | None:
    """The first field whose asked-for value is not the queue's, as its attribute name."""
    names = {field: name for name, (field, *_) in limits.QUEUE_NUMBERS.items()}
    names.update(fifo="FifoQueue", content_based_dedup="ContentBasedDeduplication")
    for field, value in fields.items():
        if getattr(queue, field) != value:
            return names.get(field, "RedrivePolicy")
    return None

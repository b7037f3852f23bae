"""SendMessage and SendMessageBatch: each message is an enqueued task whose payload is
{"body": <MessageBody>, "attributes": {...}} (plus "system_attributes" when any were sent)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker import queue
from broker.models import SqsQueue
from broker.queue import NewTask
from broker.sqs import attributes, errors, limits, params
from broker.sqs.params import Call
from broker.sqs.queues import resolve
from broker.states import Priority
from broker.validation import dump_json


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A checked message: the task to enqueue, its size, and the digests SQS answers with."""

    task: NewTask
    size: int
    digests: dict[str, str]


def outgoing(entry: dict[str, Any], found: SqsQueue) -> Outgoing:
    """One SendMessage (or batch entry) checked against SQS's rules and the queue's attributes."""
    body = params.text(entry, "MessageBody")
    attributes.check_text(body, "message body")
    delay = params.integer(entry, "DelaySeconds", 0, limits.MAX_DELAY_S, found.delay_s)
    if entry.get("MessageDeduplicationId") is not None:
        raise errors.InvalidParameterValue(
            "The request includes MessageDeduplicationId, a parameter of FIFO queues, which this "
            "broker does not offer."
        )
    user, user_size = attributes.message_attributes(entry.get("MessageAttributes") or {})
    system, _ = attributes.message_attributes(
        entry.get("MessageSystemAttributes") or {}, system=True
    )
    size = len(body.encode()) + user_size
    most = min(found.max_message_bytes, limits.MAX_MESSAGE_BYTES)
    if size > most:
        raise errors.InvalidParameterValue(
            f"One or more parameters are invalid. Reason: Message must be shorter than {most} "
            "bytes."
        )
    payload: dict[str, Any] = {"body": body, "attributes": user}
    digests = {"MD5OfMessageBody": attributes.md5_hex(body)}
    if user:
        digests["MD5OfMessageAttributes"] = attributes.md5_of_attributes(user)
    if system:
        payload["system_attributes"] = system
        digests["MD5OfMessageSystemAttributes"] = attributes.md5_of_attributes(system)
    task = NewTask(
        payload=dump_json(payload),
        max_attempts=found.max_receive_count,  # None: received any number of times
        delay_ms=delay * 1000,
        queue=found.name,
        priority=int(Priority.NORMAL),
        backoff=False,
    )
    return Outgoing(task, size, digests)


def send_message(call: Call) -> dict[str, Any]:
    """SendMessage: one enqueue."""
    message = outgoing(call.body, resolve(call))
    pk, _ = queue.enqueue(message.task)
    return {"MessageId": str(pk), **message.digests}


def send_message_batch(call: Call) -> dict[str, Any]:
    """SendMessageBatch: the good entries enqueued in one transaction, the others answered."""
    found = resolve(call)
    good: list[tuple[str, Outgoing]] = []
    failed: list[dict[str, Any]] = []
    for entry in params.entries(call.body):
        try:
            good.append((entry["Id"], outgoing(entry, found)))
        except errors.SqsError as refused:
            failed.append(refused.entry(entry["Id"]))
    total = sum(message.size for _, message in good)
    if total > limits.MAX_MESSAGE_BYTES:
        raise errors.BatchRequestTooLong(
            f"Batch requests cannot be longer than {limits.MAX_MESSAGE_BYTES} bytes. "
            f"You have sent {total} bytes."
        )
    ids = queue.enqueue_many([message.task for _, message in good]) if good else []
    successful = [
        {"Id": entry_id, "MessageId": str(pk), **message.digests}
        for (entry_id, message), pk in zip(good, ids, strict=True)
    ]
    return {"Successful": successful, "Failed": failed}

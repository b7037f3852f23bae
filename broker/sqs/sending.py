"""SendMessage and SendMessageBatch: each message is an enqueued task whose payload is
{"body": <MessageBody>, "attributes": {...}}; its deduplication id (FIFO) and system attributes
are kept beside it (extras.py). A MessageGroupId is the task's key; in a FIFO queue it is
required, and so is a deduplication id (dedup.py) unless the queue derives it from the body."""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from broker import queue
from broker.models import SqsQueue
from broker.queue import NewTask
from broker.sqs import attributes, dedup, errors, extras, limits, params
from broker.sqs.params import Call
from broker.sqs.queues import resolve
from broker.states import Priority
from broker.validation import dump_json

# MessageGroupId and MessageDeduplicationId: letters, digits and ASCII punctuation.
_TAG = re.compile(f"[!-~]{{1,{limits.MAX_MESSAGE_TAG}}}")
_WRONG_TYPE = "The request include parameter that is not valid for this queue type."


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A checked message: the task to enqueue, its size, the digests SQS answers with, in a
    FIFO queue its deduplication id, and the system attributes it was sent with."""

    task: NewTask
    size: int
    digests: dict[str, str]
    dedup_id: str | None = None
    system: dict[str, Any] = field(default_factory=dict)


def outgoing(entry: dict[str, Any], found: SqsQueue) -> Outgoing:
    """One SendMessage (or batch entry) checked against SQS's rules and the queue's attributes."""
    body = params.text(entry, "MessageBody")
    attributes.check_text(body, "message body")
    if found.fifo and entry.get("DelaySeconds") is not None:
        # A FIFO queue delays all its messages alike (its DelaySeconds attribute) or none.
        raise errors.InvalidParameterValue(
            f"Value {entry['DelaySeconds']} for parameter DelaySeconds is invalid. Reason: "
            f"{_WRONG_TYPE}"
        )
    delay = params.integer(entry, "DelaySeconds", 0, limits.MAX_DELAY_S, found.delay_s)
    group = _tag(entry, "MessageGroupId", required=found.fifo)
    dedup_id = _dedup_id(entry, body, found)
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
        digests["MD5OfMessageSystemAttributes"] = attributes.md5_of_attributes(system)
    task = NewTask(
        payload=dump_json(payload),
        max_attempts=found.max_receive_count,  # None: received any number of times
        delay_ms=delay * 1000,
        queue=found.name,
        priority=int(Priority.NORMAL),
        backoff=False,
        key=group,
    )
    return Outgoing(task, size, digests, dedup_id, system)


def _tag(entry: dict[str, Any], name: str, *, required: bool) -> str | None:
    """MessageGroupId or MessageDeduplicationId: None when absent and not required."""
    value = entry.get(name)
    if value is None and not required:
        return None
    text = params.text(entry, name)
    if not _TAG.fullmatch(text):
        raise errors.InvalidParameterValue(
            f"Value {text} for parameter {name} is invalid. Reason: It can be 1 to "
            f"{limits.MAX_MESSAGE_TAG} characters of a-z, A-Z, 0-9 and punctuation."
        )
    return text


def _dedup_id(entry: dict[str, Any], body: str, found: SqsQueue) -> str | None:
    """A FIFO message's deduplication id: as sent, else the SHA-256 of its body when the queue
    has ContentBasedDeduplication; a standard queue takes none."""
    if not found.fifo:
        if entry.get("MessageDeduplicationId") is not None:
            raise errors.InvalidParameterValue(
                f"Value {entry['MessageDeduplicationId']} for parameter MessageDeduplicationId "
                f"is invalid. Reason: {_WRONG_TYPE}"
            )
        return None
    sent = _tag(entry, "MessageDeduplicationId", required=False)
    if sent is not None:
        return sent
    if not found.content_based_dedup:
        raise errors.InvalidParameterValue(
            "The queue should either have ContentBasedDeduplication enabled or "
            "MessageDeduplicationId provided explicitly"
        )
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def sequence_number(pk: int) -> str:
    """A FIFO message's SequenceNumber: its task id, which grows with each enqueue."""
    return f"{pk:0{limits.SEQUENCE_DIGITS}d}"


def _enqueue(found: SqsQueue, messages: list[Outgoing]) -> list[dict[str, str]]:
    """Enqueue the messages (in a FIFO queue each once per deduplication id), their extras in
    the same transaction; per message the ids its answer carries."""
    # A standard batch with no extras needs no transaction of its own (enqueue_many has one).
    kept = found.fifo or any(m.system for m in messages)
    with transaction.atomic() if kept else contextlib.nullcontext():
        if found.fifo:
            sent = dedup.enqueue_once(found.name, [(m.task, m.dedup_id or "") for m in messages])
        else:
            sent = [(pk, True) for pk in queue.enqueue_many([m.task for m in messages])]
        extras.save([extras.keep(pk, m.dedup_id, m.system)
                     for (pk, new), m in zip(sent, messages, strict=True) if new])  # fmt: skip
    if not found.fifo:
        return [{"MessageId": str(pk)} for pk, _ in sent]
    return [{"MessageId": str(pk), "SequenceNumber": sequence_number(pk)} for pk, _ in sent]


def send_message(call: Call) -> dict[str, Any]:
    """SendMessage: one enqueue."""
    found = resolve(call)
    message = outgoing(call.body, found)
    if not found.fifo and not message.system:
        pk, _ = queue.enqueue(message.task)
        return {"MessageId": str(pk), **message.digests}
    (ids,) = _enqueue(found, [message])
    return {**ids, **message.digests}


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
    answers = _enqueue(found, [message for _, message in good]) if good else []
    successful = [
        {"Id": entry_id, **ids, **message.digests}
        for (entry_id, message), ids in zip(good, answers, strict=True)
    ]
    return {"Successful": successful, "Failed": failed}

"""ReceiveMessage is a claim (the long-poll of GET /jobs/next), its VisibilityTimeout the lease;
DeleteMessage is an ack; ChangeMessageVisibility extends the lease, or at 0 releases it."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from broker import queue
from broker.exceptions import BrokerError, LeaseMismatch, TaskNotHeld
from broker.longpoll import claim_wait, once
from broker.models import SqsMessage, SqsQueue, Task
from broker.queue import Delivery
from broker.sqs import attributes, errors, extras, limits, params, sending
from broker.sqs.params import Call
from broker.sqs.queues import resolve
from broker.states import State
from contract.limits import parse_task_id

# The system attribute that carries a task's last checkpoint (docs/sqs.md).
CHECKPOINT_ATTRIBUTE = "Checkpoint"
# A payload's keys when sent over SQS; the last two only in tasks sent before extras.py.
_SQS_KEYS = frozenset({"body", "attributes", "system_attributes", "deduplication_id"})
_DEDUP = "MessageDeduplicationId"
_TRACE = "AWSTraceHeader"
_NOT_CHANGEABLE = "Message does not exist or is not available for visibility timeout change."


def handle(delivery: Delivery) -> str:
    """A ReceiptHandle: the task, the lease it is held under, and its queue (opaque to clients;
    the queue lets a handle used with another queue's URL be refused without a query)."""
    task = delivery.task
    return base64.urlsafe_b64encode(f"{task.pk}:{delivery.lease_id}:{task.queue}".encode()).decode()


def held(receipt: Any, found: SqsQueue) -> tuple[int, str]:
    """(task id, lease id) named by a ReceiptHandle of this queue; else ReceiptHandleIsInvalid."""
    try:
        text = base64.urlsafe_b64decode(str(receipt).encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    pk_text, _, rest = text.partition(":")
    lease, _, queue_name = rest.partition(":")
    pk = parse_task_id(pk_text)
    if pk is None or len(lease) != 32 or not lease.isalnum() or queue_name != found.name:
        raise _invalid(str(receipt))
    return pk, lease


class _Receive(NamedTuple):
    """A ReceiveMessage's parameters, read once: a parked receive's request is served again
    when woken or at its end, without its body (broker.parking.loop.Slot), and a query for its
    queue each time was most of what its end cost."""

    found: SqsQueue
    most: int
    visible_s: int
    wait_s: int
    system: set[str]
    wanted: list[str]
    worker: str


def _receive(call: Call) -> _Receive:
    found = resolve(call)
    body = call.body
    most = params.integer(body, "MaxNumberOfMessages", 1, limits.MAX_RECEIVE, 1)
    visible_s = params.integer(
        body, "VisibilityTimeout", 0, limits.MAX_VISIBILITY_S, found.visibility_timeout_s
    )
    wait_s = params.integer(body, "WaitTimeSeconds", 0, limits.MAX_WAIT_S, found.receive_wait_s)
    system = set(params.names(body, "AttributeNames"))
    system |= set(params.names(body, "MessageSystemAttributeNames"))
    wanted = params.names(body, "MessageAttributeNames")
    return _Receive(found, most, visible_s, wait_s, system, wanted, call.worker)


def receive_message(call: Call) -> dict[str, Any]:
    """ReceiveMessage: claim up to MaxNumberOfMessages, waiting up to WaitTimeSeconds."""
    found, most, visible_s, wait_s, system, wanted, worker = once(
        call.parking, "receive", lambda: _receive(call)
    )
    got = claim_wait(
        [found.name], lease_ms=visible_s * 1000, wait_ms=wait_s * 1000, limit=most,
        worker=worker, gone=call.gone, parking=call.parking,
    )  # fmt: skip
    if visible_s == 0 and got:
        # Visible again at once: received, and handed back in the same breath.
        queue.release_many([(d.task.pk, d.lease_id) for d in got])
    if not got:
        return {}
    kept: dict[int, SqsMessage] = {}
    if "All" in system or _TRACE in system or (found.fifo and _DEDUP in system):
        kept = extras.of([d.task.pk for d in got])
    return {
        "Messages": [message(d, system, wanted, fifo=found.fifo, kept=kept.get(d.task.pk))
                     for d in got]
    }  # fmt: skip


def message(
    delivery: Delivery,
    system: set[str],
    wanted: list[str],
    *,
    fifo: bool = False,
    kept: SqsMessage | None = None,
) -> dict[str, Any]:
    """One received message: the body, the attributes asked for, and their MD5s; `kept`, its
    extras, when the attributes asked for include any."""
    task = delivery.task
    stored = json.loads(task.payload)  # parsed once: the body and any extras of an older task
    body, user, system_attributes = split_payload(stored, task.payload)
    if kept is not None:
        system_attributes = kept.system_attributes
    out: dict[str, Any] = {
        "MessageId": str(task.pk), "ReceiptHandle": handle(delivery),
        "MD5OfBody": attributes.md5_hex(body), "Body": body,
    }  # fmt: skip
    every = "All" in system
    known = {
        "ApproximateReceiveCount": str(task.attempts),
        "SentTimestamp": str(_epoch_ms(task.created_at)),
    }
    trace = system_attributes.get(_TRACE, {}).get("StringValue")
    if trace is not None:
        known[_TRACE] = trace
    if task.key is not None:
        known["MessageGroupId"] = task.key
    if fifo:
        known["SequenceNumber"] = sending.sequence_number(task.pk)
        dedup_id = None
        if every or _DEDUP in system:
            dedup_id = kept.deduplication_id if kept is not None else _deduplication_id(stored)
        if dedup_id is not None:
            known[_DEDUP] = dedup_id
    if task.checkpoint is not None:
        # Not an SQS attribute: the last checkpoint a native worker reported on this task
        # (POST /jobs/{id}/progress), as JSON text, so a receive after a failure resumes too.
        known[CHECKPOINT_ATTRIBUTE] = task.checkpoint
    chosen = {name: value for name, value in known.items() if every or name in system}
    if chosen:
        out["Attributes"] = chosen
    picked = {name: value for name, value in user.items() if _asked(name, wanted)}
    if picked:
        out["MessageAttributes"] = picked
        out["MD5OfMessageAttributes"] = attributes.md5_of_attributes(picked)
    return out


def _asked(name: str, wanted: list[str]) -> bool:
    return any(
        w in ("All", ".*") or w == name or (w.endswith(".*") and name.startswith(w[:-1]))
        for w in wanted
    )


def _deduplication_id(value: Any) -> str | None:
    found = value.get("deduplication_id") if isinstance(value, dict) else None
    return found if isinstance(found, str) else None


def split_payload(value: Any, payload: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(Body, message attributes, system attributes) of a stored payload (`value` parsed from
    the JSON text `payload`): one sent over SQS, or any other (a native task): a JSON string is
    its text, other JSON its text as stored."""
    if (
        isinstance(value, dict)
        and isinstance(value.get("body"), str)
        and _SQS_KEYS.issuperset(value)
        and all(isinstance(value.get(k, {}), dict) for k in ("attributes", "system_attributes"))
    ):
        return value["body"], value.get("attributes", {}), value.get("system_attributes", {})
    return (value if isinstance(value, str) else payload), {}, {}


def delete_message(call: Call) -> dict[str, Any]:
    """DeleteMessage: ack. The latest handle deletes its message even once its visibility
    timeout lapsed, until the message is received again; an older handle succeeds and deletes
    nothing, as in SQS; one naming no message of this queue is ReceiptHandleIsInvalid."""
    found = resolve(call)
    receipt = params.text(call.body, "ReceiptHandle")
    pk, lease = held(receipt, found)
    if _delete([(pk, lease)])[0] is not None and not _in_queue([pk], found):
        raise _invalid(receipt)
    return {}


def _delete(items: list[tuple[int, str]]) -> list[Any]:
    """Ack each (task, lease); a task no longer held under it, whose lapsed lease was the latest,
    is deleted all the same (queue.ack_lapsed). Per item: None when deleted, else ack's outcome."""
    outcomes = queue.ack_many([(pk, lease, None) for pk, lease in items])
    lapsed = [i for i, outcome in enumerate(outcomes) if outcome is TaskNotHeld]
    if lapsed:
        for i, moved in zip(lapsed, queue.ack_lapsed([items[i] for i in lapsed]), strict=True):
            if moved:
                outcomes[i] = None
    return outcomes


def delete_message_batch(call: Call) -> dict[str, Any]:
    """DeleteMessageBatch: one batch ack; each entry answered as its DeleteMessage would be."""
    found = resolve(call)
    items: list[tuple[str, str, int, str]] = []
    failed: list[dict[str, Any]] = []
    for entry in params.entries(call.body):
        try:
            receipt = params.text(entry, "ReceiptHandle")
            items.append((entry["Id"], receipt, *held(receipt, found)))
        except errors.SqsError as refused:
            failed.append(refused.entry(entry["Id"]))
    outcomes = _delete([(pk, lease) for _, _, pk, lease in items]) if items else []
    missed = [pk for (_, _, pk, _), outcome in zip(items, outcomes, strict=True) if outcome]
    known = _in_queue(missed, found) if missed else set()
    successful = []
    for (entry_id, receipt, pk, _), outcome in zip(items, outcomes, strict=True):
        if outcome is None or pk in known:
            successful.append({"Id": entry_id})
        else:
            failed.append(_invalid(receipt).entry(entry_id))
    return {"Successful": successful, "Failed": failed}


def _in_queue(pks: list[int], found: SqsQueue) -> set[int]:
    return set(Task.objects.filter(pk__in=pks, queue=found.name).values_list("pk", flat=True))


def _invalid(receipt: str) -> errors.SqsError:
    return errors.ReceiptHandleIsInvalid(
        f'The input receipt handle "{receipt}" is not a valid receipt handle.'
    )


def change_message_visibility(call: Call) -> dict[str, Any]:
    """ChangeMessageVisibility: the lease extended to now + VisibilityTimeout; 0 releases it."""
    found = resolve(call)
    receipt = params.text(call.body, "ReceiptHandle")
    seconds = params.integer(call.body, "VisibilityTimeout", 0, limits.MAX_VISIBILITY_S, None)
    _change(found, receipt, seconds)
    return {}


def change_message_visibility_batch(call: Call) -> dict[str, Any]:
    """ChangeMessageVisibilityBatch: each entry as its ChangeMessageVisibility would be."""
    found = resolve(call)
    successful, failed = [], []
    for entry in params.entries(call.body):
        try:
            receipt = params.text(entry, "ReceiptHandle")
            seconds = params.integer(entry, "VisibilityTimeout", 0, limits.MAX_VISIBILITY_S, None)
            _change(found, receipt, seconds)
            successful.append({"Id": entry["Id"]})
        except errors.SqsError as refused:
            failed.append(refused.entry(entry["Id"]))
    return {"Successful": successful, "Failed": failed}


def _change(found: SqsQueue, receipt: str, seconds: int) -> None:
    pk, lease = held(receipt, found)
    try:
        if seconds == 0:
            queue.release(pk, lease_id=lease)
        else:
            queue.extend(pk, lease_id=lease, lease_ms=seconds * 1000)
    except BrokerError as refused:
        state = Task.objects.filter(pk=pk, queue=found.name).values_list("state", flat=True)
        now = state.first()
        if now is None:
            raise _invalid(receipt) from None
        if now in (State.READY, State.DELAYED) and not isinstance(refused, LeaseMismatch):
            raise errors.MessageNotInflight("The message referred to is not in flight.") from None
        raise errors.InvalidParameterValue(
            f"Value {receipt} for parameter ReceiptHandle is invalid. Reason: {_NOT_CHANGEABLE}"
        ) from None


def _epoch_ms(api_time: str) -> int:
    """A claim's created_at (API text, UTC, milliseconds) as epoch milliseconds."""
    sent = datetime.fromisoformat(api_time.replace("Z", "+00:00"))
    return (sent - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)

"""POST /sqs: Amazon SQS's JSON protocol (X-Amz-Target: AmazonSQS.<Action>, a JSON body),
verified by Signature V4 when the API's tokens are on, dispatched to one action."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from broker.longpoll import parking_of, socket_gone
from broker.parking.loop import Slot
from broker.sqs import errors, limits, queues, receiving, sending, sigv4
from broker.sqs.params import Call
from broker.tokens import auth, sqskeys
from broker.tokens.grants import FULL
from contract.conf import broker_settings
from contract.limits import whole_number

log = logging.getLogger(__name__)

Action = Callable[[Call], dict[str, Any]]
ACTIONS: dict[str, Action] = {
    "CreateQueue": queues.create_queue,
    "GetQueueUrl": queues.get_queue_url,
    "ListQueues": queues.list_queues,
    "GetQueueAttributes": queues.get_queue_attributes,
    "SetQueueAttributes": queues.set_queue_attributes,
    "PurgeQueue": queues.purge_queue,
    "DeleteQueue": queues.delete_queue,
    "SendMessage": sending.send_message,
    "SendMessageBatch": sending.send_message_batch,
    "ReceiveMessage": receiving.receive_message,
    "DeleteMessage": receiving.delete_message,
    "DeleteMessageBatch": receiving.delete_message_batch,
    "ChangeMessageVisibility": receiving.change_message_visibility,
    "ChangeMessageVisibilityBatch": receiving.change_message_visibility_batch,
}
# SQS's other actions: UnsupportedOperation, not InvalidAction (they exist, just not here).
NOT_OFFERED = frozenset(
    {
        "AddPermission", "RemovePermission", "TagQueue", "UntagQueue", "ListQueueTags",
        "ListDeadLetterSourceQueues", "StartMessageMoveTask", "CancelMessageMoveTask",
        "ListMessageMoveTasks",
    }
)  # fmt: skip
TARGET_PREFIX = "AmazonSQS."
# None given is read as JSON, as on the native API (API.md's Errors).
_JSON_TYPES = ("application/x-amz-json-1.0", "application/x-amz-json-1.1", "application/json", "")


@csrf_exempt
def endpoint(request: HttpRequest, queue_name: str | None = None) -> HttpResponse:
    """One SQS request → its action's JSON answer, or SQS's JSON error (never a 500 page)."""
    request_id = str(uuid.uuid4())
    try:
        return errors.reply(_handle(request, queue_name), request_id)
    except errors.SqsError as refused:
        return refused.response(request_id)
    except DatabaseError as exc:
        log.warning("database error answered with 503: %s", exc)
        unavailable = errors.ServiceUnavailable("The database cannot be reached; try again.")
        return unavailable.response(request_id)
    except Exception:
        log.exception("unhandled error on SQS %s", request.META.get("HTTP_X_AMZ_TARGET"))
        return errors.InternalFailure("Internal error; it has been logged.").response(request_id)


def _handle(request: HttpRequest, queue_name: str | None) -> dict[str, Any]:
    if request.method != "POST":
        raise errors.MethodNotAllowed("The SQS endpoint takes POST requests only.")
    parking = parking_of(request.META)
    if parking is not None and parking.resumed:
        # A parked ReceiveMessage served again (woken, or its wait over): its body was checked,
        # verified and read on its first dispatch and is not kept (broker.parking.loop.Slot);
        # what the receive needs of it is in its slot.
        return receiving.receive_message(_call(request, queue_name, {}, "", parking))
    length = whole_number(request.META.get("CONTENT_LENGTH") or "0")
    if length is None or length > limits.MAX_REQUEST_BYTES:
        raise errors.RequestEntityTooLarge(
            f"The request body is over the {limits.MAX_REQUEST_BYTES}-byte limit."
        )
    try:
        body = request.body
    except RequestDataTooBig:  # a project's DATA_UPLOAD_MAX_MEMORY_SIZE below SQS's limit
        raise errors.RequestEntityTooLarge(
            f"The request body is over this server's {settings.DATA_UPLOAD_MAX_MEMORY_SIZE}-byte"
            " limit (DATA_UPLOAD_MAX_MEMORY_SIZE)."
        ) from None
    if len(body) < length:
        # The client hung up mid-body: what arrived may parse, but it is not what was sent.
        raise errors.SerializationException("The request body ended before its Content-Length.")
    key_id = None
    grants = FULL
    if auth.closed():
        keys = sqskeys.Credentials(broker_settings.BROKER_SQS_CREDENTIALS)
        key_id = sigv4.verify(request, body, keys, timezone.now())  # type: ignore[arg-type]
        grants = keys.access_of(key_id)
    action = _action(request)
    content_type = request.META.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower()
    if content_type not in _JSON_TYPES:
        raise errors.UnsupportedMediaType(
            "The SQS endpoint takes application/x-amz-json-1.0 bodies (the JSON protocol)."
        )
    worker = f"sqs:{key_id}" if key_id else "sqs"
    call = _call(request, queue_name, _body(body), worker, parking)
    sqskeys.check(grants, action, call)
    answer = ACTIONS[action](call)
    return sqskeys.listed(grants, action, answer)


def _call(
    request: HttpRequest,
    queue_name: str | None,
    body: dict[str, Any],
    worker: str,
    parking: Slot | None,
) -> Call:
    return Call(
        body=body, base_url=_base_url(request, queue_name), path_queue=queue_name, worker=worker,
        gone=socket_gone(request.META.get("gunicorn.socket")), parking=parking,
    )  # fmt: skip


def _action(request: HttpRequest) -> str:
    target = request.META.get("HTTP_X_AMZ_TARGET", "")
    if not target:
        raise errors.MissingAction(
            "The request has no X-Amz-Target header: this endpoint speaks SQS's JSON protocol."
        )
    service, _, action = target.partition(".")
    if service + "." != TARGET_PREFIX or not action:
        raise errors.InvalidAction(f"The action or operation requested is invalid: {target[:100]}")
    if action in NOT_OFFERED:
        raise errors.UnsupportedOperation(f"{action} is not offered by this broker.")
    if action not in ACTIONS:
        raise errors.InvalidAction(f"The action or operation requested is invalid: {action[:100]}")
    return action


def _body(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        raise errors.SerializationException("The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise errors.SerializationException("The request body must be a JSON object.")
    return data


def _base_url(request: HttpRequest, queue_name: str | None) -> str:
    """scheme://host, and the path before /sqs: a project of yours may route the broker's URLs
    under a prefix (/queue/sqs), and queue URLs must lead back through it."""
    path = request.path.rstrip("/")
    if queue_name and path.endswith(f"/{queue_name}"):
        path = path[: -len(queue_name) - 1]
    prefix = path[: -len(limits.PATH)] if path.endswith(limits.PATH) else ""
    try:
        return f"{request.scheme}://{request.get_host()}{prefix}"
    except DisallowedHost:
        raise errors.InvalidAddress("The Host header names a host not in ALLOWED_HOSTS.") from None

"""SQS's errors: the `__type` and `x-amzn-query-error` code SDKs map to exceptions, the status."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse

CONTENT_TYPE = "application/x-amz-json-1.0"


class SqsError(Exception):
    """An error SQS answers with: its shape name, its query-protocol code, HTTP status, fault."""

    code = "InternalFailure"
    query_code: str | None = None  # the code botocore surfaces; None: the same as `code`
    status = 400
    sender = True  # the caller's fault (Sender) or the service's (Receiver)

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def response(self, request_id: str) -> HttpResponse:
        """The JSON error answer, with the header the JSON protocol's query mode reads."""
        body = {"__type": f"com.amazonaws.sqs#{self.code}", "message": self.message}
        answer = reply(body, request_id, self.status)
        fault = "Sender" if self.sender else "Receiver"
        answer["x-amzn-query-error"] = f"{self.query_code or self.code};{fault}"
        return answer

    def entry(self, entry_id: str) -> dict[str, Any]:
        """This error as one failed item of a batch answer."""
        return {"Id": entry_id, "SenderFault": self.sender, "Code": self.code,
                "Message": self.message}  # fmt: skip


def reply(body: dict[str, Any], request_id: str, status: int = 200) -> HttpResponse:
    """An SQS JSON answer (ASCII escapes keep any text sendable)."""
    answer = HttpResponse(json.dumps(body), status=status, content_type=CONTENT_TYPE)
    answer["x-amzn-RequestId"] = request_id
    return answer


def _error(name: str, query_code: str | None = None, status: int = 400) -> type[SqsError]:
    return type(name, (SqsError,), {"code": name, "query_code": query_code, "status": status,
                                    "__doc__": f"SQS's {name}."})  # fmt: skip


_Q = "AWS.SimpleQueueService."
QueueDoesNotExist = _error("QueueDoesNotExist", _Q + "NonExistentQueue")
QueueNameExists = _error("QueueNameExists", "QueueAlreadyExists")
ReceiptHandleIsInvalid = _error("ReceiptHandleIsInvalid")
MessageNotInflight = _error("MessageNotInflight", _Q + "MessageNotInflight")
InvalidParameterValue = _error("InvalidParameterValue")
MissingParameter = _error("MissingParameter")
InvalidAttributeName = _error("InvalidAttributeName")
InvalidAttributeValue = _error("InvalidAttributeValue")
InvalidMessageContents = _error("InvalidMessageContents")
InvalidAddress = _error("InvalidAddress")
TooManyEntriesInBatchRequest = _error(
    "TooManyEntriesInBatchRequest", _Q + "TooManyEntriesInBatchRequest"
)
EmptyBatchRequest = _error("EmptyBatchRequest", _Q + "EmptyBatchRequest")
BatchEntryIdsNotDistinct = _error("BatchEntryIdsNotDistinct", _Q + "BatchEntryIdsNotDistinct")
InvalidBatchEntryId = _error("InvalidBatchEntryId", _Q + "InvalidBatchEntryId")
BatchRequestTooLong = _error("BatchRequestTooLong", _Q + "BatchRequestTooLong")
UnsupportedOperation = _error("UnsupportedOperation", _Q + "UnsupportedOperation")
InvalidAction = _error("InvalidAction")
MissingAction = _error("MissingAction")
SerializationException = _error("SerializationException")
UnsupportedMediaType = _error("UnsupportedMediaType", status=415)
RequestEntityTooLarge = _error("RequestEntityTooLarge", status=413)
MethodNotAllowed = _error("MethodNotAllowed", status=405)
InvalidClientTokenId = _error("InvalidClientTokenId", status=403)
SignatureDoesNotMatch = _error("SignatureDoesNotMatch", status=403)
MissingAuthenticationToken = _error("MissingAuthenticationToken", status=403)
# A key whose token's grants do not cover the action on the queue (SQS: AccessDenied, 403).
AccessDenied = _error("AccessDenied", status=403)


class ServiceUnavailable(SqsError):
    """SQS's ServiceUnavailable: the database cannot be reached (SDKs retry it)."""

    code = "ServiceUnavailable"
    status = 503
    sender = False


class InternalFailure(SqsError):
    """SQS's InternalFailure: a bug, logged."""

    status = 500
    sender = False

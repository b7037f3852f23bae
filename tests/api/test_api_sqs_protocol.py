"""The JSON protocol's envelope: target, content type, body, size, errors and their headers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.compat import HTTPHeaders
from botocore.credentials import Credentials
from django.test import override_settings

from broker.models import Task
from broker.states import State
from contract import limits
from tests.api.conftest import JSON_1_0, Sqs

pytestmark = pytest.mark.django_db


def _error(sqs: Sqs, *args, **kwargs) -> tuple[int, str, str, str]:
    status, body, response = sqs(*args, **kwargs)
    return status, body["__type"], body["message"], response["x-amzn-query-error"]


def test_error__unknown_queue__sqs_shape_and_query_header(sqs: Sqs) -> None:
    status, kind, message, header = _error(sqs, "GetQueueUrl", {"QueueName": "nope"})
    assert (status, kind) == (400, "com.amazonaws.sqs#QueueDoesNotExist")
    assert message == "The specified queue does not exist."
    assert header == "AWS.SimpleQueueService.NonExistentQueue;Sender"


def test_answer__content_type_and_request_id(sqs: Sqs, queue_url) -> None:
    queue_url("q")
    status, body, response = sqs("GetQueueUrl", {"QueueName": "q"})
    assert status == 200
    assert body == {"QueueUrl": "http://testserver/sqs/q"}
    assert response["Content-Type"] == JSON_1_0
    assert len(response["x-amzn-RequestId"]) == 36


@pytest.mark.parametrize(
    ("target", "status", "code"),
    [
        ("", 400, "MissingAction"),
        ("AmazonSQS.Nope", 400, "InvalidAction"),
        ("DynamoDB_20120810.GetItem", 400, "InvalidAction"),
        ("AmazonSQS.TagQueue", 400, "UnsupportedOperation"),
    ],
)
def test_target__missing_unknown_or_not_offered__refused(
    sqs: Sqs, target: str, status: int, code: str
) -> None:
    got = _error(sqs, "x", {}, HTTP_X_AMZ_TARGET=target)
    assert got[:2] == (status, f"com.amazonaws.sqs#{code}")


def test_content_type__form__415_changes_nothing(sqs: Sqs) -> None:
    got = _error(
        sqs, "CreateQueue", raw="QueueName=q", content_type="application/x-www-form-urlencoded"
    )
    assert got[:2] == (415, "com.amazonaws.sqs#UnsupportedMediaType")
    assert sqs("GetQueueUrl", {"QueueName": "q"})[0] == 400


def test_content_type__none__read_as_json(client) -> None:
    response = client.generic("POST", "/sqs", b'{"QueueName": "untyped"}', content_type="",
                              HTTP_X_AMZ_TARGET="AmazonSQS.CreateQueue")  # fmt: skip
    assert response.status_code == 200, response.content
    assert json.loads(response.content)["QueueUrl"].endswith("/sqs/untyped")


@pytest.mark.parametrize("raw", ["{", "[]", '"x"'])
def test_body__not_a_json_object__serialization_exception(sqs: Sqs, raw: str) -> None:
    assert _error(sqs, "ListQueues", raw=raw)[:2] == (
        400,
        "com.amazonaws.sqs#SerializationException",
    )


def test_method__get__405_sqs_shape(client) -> None:
    response = client.get("/sqs")
    assert response.status_code == 405
    assert json.loads(response.content)["__type"] == "com.amazonaws.sqs#MethodNotAllowed"


@override_settings(BROKER_MAX_BODY_BYTES=1000)
def test_body_limit__native_limit_does_not_apply__full_size_message_does(
    sqs: Sqs, queue_url
) -> None:
    url = queue_url("big")
    attribute = {"n": {"DataType": "String", "StringValue": "v"}}  # 1 + 6 + 1 bytes
    # A full-size message (1 MiB with its attributes), JSON-escaped as botocore sends it: every
    # "é" is six bytes, so the request is over 3 MiB.
    body = "é" * 524_284
    assert len(body.encode()) + 8 == 1_048_576
    full = {"QueueUrl": url, "MessageBody": body, "MessageAttributes": attribute}
    status, sent, _ = sqs("SendMessage", full)
    assert status == 200, sent
    status, got, _ = sqs("ReceiveMessage", {"QueueUrl": url})
    assert got["Messages"][0]["Body"] == body
    assert got["Messages"][0]["MD5OfBody"] == sent["MD5OfMessageBody"]
    status, refused, _ = sqs("SendMessage", {**full, "MessageBody": body + "x"})
    assert (status, refused["__type"]) == (400, "com.amazonaws.sqs#InvalidParameterValue")
    assert "1048576" in refused["message"]
    over = limits.SQS_MAX_REQUEST_BYTES + 1 - len(json.dumps({"QueueUrl": url, "MessageBody": ""}))
    status, body_, _ = sqs("SendMessage", {"QueueUrl": url, "MessageBody": "x" * over})
    assert (status, body_["__type"]) == (413, "com.amazonaws.sqs#RequestEntityTooLarge")


@override_settings(BROKER_API_TOKENS=["tok"], BROKER_SQS_CREDENTIALS={"AK": "SK"})
def test_tokens_on__unsigned__403_missing_authentication_token(sqs: Sqs) -> None:
    status, kind, _, _ = _error(sqs, "ListQueues", {})
    assert (status, kind) == (403, "com.amazonaws.sqs#MissingAuthenticationToken")


@override_settings(BROKER_API_TOKENS=["tok"], BROKER_SQS_CREDENTIALS={"AK": "SK"})
def test_tokens_on__bearer_token_is_not_a_signature(sqs: Sqs) -> None:
    status, kind, _, _ = _error(sqs, "ListQueues", {}, HTTP_AUTHORIZATION="Bearer tok")
    assert (status, kind) == (403, "com.amazonaws.sqs#MissingAuthenticationToken")


def _signed_over(names: set[str], body: bytes, target: str) -> dict[str, str]:
    """Django client headers of a request botocore signed over `names` only."""
    request = AWSRequest(
        method="POST", url="http://testserver/sqs", data=body,
        headers={"Content-Type": JSON_1_0, "X-Amz-Target": target},
    )  # fmt: skip
    signer = SigV4Auth(Credentials("AK", "SK"), "sqs", "us-east-1")
    every = signer.headers_to_sign

    def only_names(request: AWSRequest) -> HTTPHeaders:
        kept = HTTPHeaders()
        for name, value in every(request).items():
            if name in names:
                kept[name] = value
        return kept

    signer.headers_to_sign = only_names  # type: ignore[method-assign]
    signer.add_auth(request)
    headers = {"HTTP_HOST": "testserver"}  # what botocore signed, from the URL
    for name, value in request.headers.items():
        if name.lower() != "content-type":
            headers["HTTP_" + name.upper().replace("-", "_")] = value
    return headers


@override_settings(BROKER_API_TOKENS=["tok"], BROKER_SQS_CREDENTIALS={"AK": "SK"})
def test_tokens_on__target_not_signed__403_and_a_replay_as_purge_purges_nothing(
    sqs: Sqs,
) -> None:
    def signed(action: str, body: dict, names: set[str]) -> tuple[int, dict, Any]:
        raw = json.dumps(body)
        headers = _signed_over(names, raw.encode(), f"AmazonSQS.{action}")
        return sqs(action, raw=raw, **headers)

    every = {"host", "x-amz-date", "x-amz-target"}
    status, answer, _ = signed("CreateQueue", {"QueueName": "kept"}, every)
    assert status == 200, answer
    url = answer["QueueUrl"]
    assert signed("SendMessage", {"QueueUrl": url, "MessageBody": "m"}, every)[0] == 200
    raw = json.dumps({"QueueUrl": url})
    captured = _signed_over({"host", "x-amz-date"}, raw.encode(), "AmazonSQS.ReceiveMessage")
    replay = {**captured, "HTTP_X_AMZ_TARGET": "AmazonSQS.PurgeQueue"}
    status, kind, message, _ = _error(sqs, "PurgeQueue", raw=raw, **replay)
    assert (status, kind) == (403, "com.amazonaws.sqs#SignatureDoesNotMatch")
    assert "x-amz-target" in message
    assert Task.objects.filter(queue="kept", state=State.READY).count() == 1


def test_tokens_off__any_signature_accepted(sqs: Sqs) -> None:
    garbage = "AWS4-HMAC-SHA256 Credential=x/y/z/sqs/aws4_request, SignedHeaders=host, Signature=0"
    assert sqs("ListQueues", {}, HTTP_AUTHORIZATION=garbage)[0] == 200


def test_queue_url_path__action_without_queue_url__that_queue(sqs: Sqs, queue_url) -> None:
    queue_url("viaurl")
    status, body, _ = sqs("SendMessage", {"MessageBody": "m"}, path="/sqs/viaurl")
    assert status == 200, body
    status, body, _ = sqs("ReceiveMessage", {}, path="/sqs/viaurl")
    assert [m["Body"] for m in body["Messages"]] == ["m"]

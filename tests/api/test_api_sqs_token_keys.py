"""SQS keys of access tokens (`createtoken --sqs`): signed requests get the token's grants; the
secret is kept encrypted; a revoked token's key is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from django.test import Client

from broker.models import AccessToken
from broker.tokens import making
from tests.api.conftest import JSON_1_0

pytestmark = pytest.mark.django_db


def _sqs(key: str, secret: str, action: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    raw = json.dumps(body).encode()
    request = AWSRequest(
        method="POST", url="http://testserver/sqs", data=raw,
        headers={"Content-Type": JSON_1_0, "X-Amz-Target": f"AmazonSQS.{action}"},
    )  # fmt: skip
    SigV4Auth(Credentials(key, secret), "sqs", "us-east-1").add_auth(request)
    headers = {"HTTP_HOST": "testserver"}
    for name, value in request.headers.items():
        if name.lower() != "content-type":
            headers["HTTP_" + name.upper().replace("-", "_")] = value
    r = Client().post("/sqs", data=raw, content_type=JSON_1_0, **headers)
    return r.status_code, json.loads(r.content or b"{}")


@pytest.fixture
def keys(settings: Any) -> dict[str, tuple[str, str]]:
    settings.BROKER_SQS_CREDENTIALS = {"ENVKEY": "env-secret"}
    a = making.make("tenant-a", ["all:tenant-a-*"], sqs=True)
    b = making.make("tenant-b", ["all:tenant-b-*"], sqs=True)
    assert a.sqs_key_id and a.sqs_secret and b.sqs_key_id and b.sqs_secret
    return {
        "a": (a.sqs_key_id, a.sqs_secret),
        "b": (b.sqs_key_id, b.sqs_secret),
        "env": ("ENVKEY", "env-secret"),
    }


def test_sqs_key__secret_encrypted_at_rest() -> None:
    made = making.make("k", ["all:*"], sqs=True)
    row = AccessToken.objects.get(name="k")
    assert made.sqs_secret and made.sqs_secret not in row.sqs_secret_encrypted
    assert making.decrypt(row.sqs_secret_encrypted) == made.sqs_secret


def test_sqs_key__grants_apply(keys: dict[str, tuple[str, str]]) -> None:
    a, b, env = keys["a"], keys["b"], keys["env"]
    status, made = _sqs(*a, "CreateQueue", {"QueueName": "tenant-b-x"})
    assert (status, made["__type"]) == (403, "com.amazonaws.sqs#AccessDenied")
    status, made = _sqs(*a, "CreateQueue", {"QueueName": "tenant-a-q"})
    assert status == 200, made
    url = made["QueueUrl"]
    assert _sqs(*env, "CreateQueue", {"QueueName": "tenant-b-q"})[0] == 200
    assert _sqs(*a, "SendMessage", {"QueueUrl": url, "MessageBody": "hi"})[0] == 200
    # b's key: a's queue does not exist for it, whatever it asks.
    for action, body in [
        ("SendMessage", {"QueueUrl": url, "MessageBody": "x"}),
        ("ReceiveMessage", {"QueueUrl": url}),
        ("PurgeQueue", {"QueueUrl": url}),
        ("GetQueueAttributes", {"QueueUrl": url}),
        ("GetQueueUrl", {"QueueName": "tenant-a-q"}),
    ]:
        status, answer = _sqs(*b, action, body)
        assert (status, answer["__type"]) == (400, "com.amazonaws.sqs#QueueDoesNotExist"), action
    listed = _sqs(*b, "ListQueues", {})[1]["QueueUrls"]
    assert [u.rsplit("/", 1)[1] for u in listed] == ["tenant-b-q"]
    status, got = _sqs(*a, "ReceiveMessage", {"QueueUrl": url})
    assert got["Messages"][0]["Body"] == "hi"


def test_sqs_key__read_only_token__access_denied(keys: dict[str, tuple[str, str]]) -> None:
    reader = making.make("reader", ["read:tenant-a-*"], sqs=True)
    assert _sqs(*keys["a"], "CreateQueue", {"QueueName": "tenant-a-q"})[0] == 200
    key = (reader.sqs_key_id or "", reader.sqs_secret or "")
    url = _sqs(*key, "GetQueueUrl", {"QueueName": "tenant-a-q"})[1]["QueueUrl"]
    status, answer = _sqs(*key, "SendMessage", {"QueueUrl": url, "MessageBody": "x"})
    assert (status, answer["__type"]) == (403, "com.amazonaws.sqs#AccessDenied")
    assert "produce" in answer["message"] and "tenant-a-q" in answer["message"]


def test_sqs_key__revoked__invalid_client_token_id(keys: dict[str, tuple[str, str]]) -> None:
    assert _sqs(*keys["a"], "ListQueues", {})[0] == 200
    making.revoke(AccessToken.objects.filter(name="tenant-a"))
    status, answer = _sqs(*keys["a"], "ListQueues", {})
    assert (status, answer["__type"]) == (403, "com.amazonaws.sqs#InvalidClientTokenId")
    assert _sqs(*keys["b"], "ListQueues", {})[0] == 200

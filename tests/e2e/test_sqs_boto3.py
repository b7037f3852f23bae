"""The real boto3 client, unchanged but for endpoint_url, against gunicorn (and a sweeper)."""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.procs import gunicorn, http, sweeping, wait_until

# Transactional: the test database exists for the module's broker, and is emptied after each test.
pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def broker(live_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One broker (gunicorn, 2 processes) and a fast sweeper for the module; each test uses its
    own queues."""
    tmp = tmp_path_factory.mktemp("sqs")
    url = live_db_url
    with (
        gunicorn(url, tmp) as base,
        sweeping(url, tmp, 50),
    ):
        yield base


def client(base: str, **config: Any) -> Any:
    """boto3's SQS client as a script written for Amazon SQS makes it, pointed at the broker."""
    return boto3.client(
        "sqs", endpoint_url=f"{base}/sqs", region_name="eu-west-1",
        aws_access_key_id=config.pop("key", "AKIDTEST"),
        aws_secret_access_key=config.pop("secret", "secret"),
        config=Config(retries={"max_attempts": 1}, **config),
    )  # fmt: skip


@pytest.fixture
def sqs(broker: str) -> Any:
    return client(broker)


@pytest.fixture
def loose(broker: str) -> Any:
    """A client that sends what it is given (no client-side check of required parameters)."""
    return client(broker, parameter_validation=False)


def _md5_attributes(attrs: dict[str, dict[str, Any]]) -> str:
    """SQS's MD5 of message attributes, written here again from SQS's documentation."""
    out = b""
    for name in sorted(attrs):
        value = attrs[name]
        for text in (name, value["DataType"]):
            out += struct.pack(">I", len(text.encode())) + text.encode()
        if "BinaryValue" in value:
            data = value["BinaryValue"]
            out += b"\x02" + struct.pack(">I", len(data)) + data
        else:
            data = value["StringValue"].encode()
            out += b"\x01" + struct.pack(">I", len(data)) + data
    return hashlib.md5(out).hexdigest()  # noqa: S324 -- SQS's digest, not security


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()  # noqa: S324 -- SQS's digest


def _code(call: Any, **kwargs: Any) -> tuple[str, int]:
    with pytest.raises(ClientError) as caught:
        call(**kwargs)
    error = caught.value.response
    return error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]


def _task(base: str, message_id: str) -> dict[str, Any]:
    status, body = http("GET", f"{base}/jobs/{message_id}")
    assert status == 200, body
    return body


ATTRIBUTES = {
    "text": {"DataType": "String", "StringValue": "héllo ✓ 𝄞"},
    "count": {"DataType": "Number", "StringValue": "-12.5e3"},
    "ratio": {"DataType": "Number.float", "StringValue": "0.25"},
    "blob": {"DataType": "Binary", "BinaryValue": bytes(range(256))},
    "image": {"DataType": "Binary.png", "BinaryValue": b"\x89PNG"},
    "label": {"DataType": "String.label", "StringValue": "x"},
}


def test_send_receive_delete__every_attribute_type__both_md5s(sqs: Any, broker: str) -> None:
    url = sqs.create_queue(QueueName="types")["QueueUrl"]
    assert url == f"{broker}/sqs/types"
    body = "body é ✓ 𝄞 <xml/> {json}"
    trace = {"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3f"}}
    sent = sqs.send_message(
        QueueUrl=url, MessageBody=body, MessageAttributes=ATTRIBUTES, MessageSystemAttributes=trace
    )
    assert sent["MD5OfMessageBody"] == _md5(body)
    assert sent["MD5OfMessageAttributes"] == _md5_attributes(ATTRIBUTES)
    assert sent["MD5OfMessageSystemAttributes"] == _md5_attributes(trace)
    got = sqs.receive_message(
        QueueUrl=url, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"]
    )["Messages"]
    assert len(got) == 1
    message = got[0]
    assert (message["MessageId"], message["Body"]) == (sent["MessageId"], body)
    assert message["MD5OfBody"] == _md5(body)
    assert message["MessageAttributes"] == ATTRIBUTES
    assert message["MD5OfMessageAttributes"] == _md5_attributes(ATTRIBUTES)
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"
    assert message["Attributes"]["AWSTraceHeader"] == "Root=1-5759e988-bd862e3f"
    assert abs(int(message["Attributes"]["SentTimestamp"]) / 1000 - time.time()) < 60
    task = _task(broker, sent["MessageId"])
    assert (task["state"], task["queue"], task["worker"]) == ("handed_out", "types", "sqs")
    assert task["payload"]["body"] == body and set(task["payload"]) == {"body", "attributes"}
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert _task(broker, sent["MessageId"])["state"] == "done"


def test_receive__message_attribute_names__only_those_with_their_md5(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="names")["QueueUrl"]
    attrs = {
        "a.one": {"DataType": "String", "StringValue": "1"},
        "a.two": {"DataType": "String", "StringValue": "2"},
        "b": {"DataType": "String", "StringValue": "3"},
    }
    sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=attrs)
    message = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["a.*"], VisibilityTimeout=0)
    picked = message["Messages"][0]
    assert set(picked["MessageAttributes"]) == {"a.one", "a.two"}
    assert picked["MD5OfMessageAttributes"] == _md5_attributes(picked["MessageAttributes"])
    plain = sqs.receive_message(QueueUrl=url)["Messages"][0]
    assert "MessageAttributes" not in plain and "Attributes" not in plain


def test_queue_actions__create_get_list_attributes_purge_delete(sqs: Any, broker: str) -> None:
    url = sqs.create_queue(
        QueueName="qa-main", Attributes={"VisibilityTimeout": "45", "DelaySeconds": "0"}
    )["QueueUrl"]
    assert sqs.create_queue(QueueName="qa-main")["QueueUrl"] == url
    with pytest.raises(sqs.exceptions.QueueNameExists):
        sqs.create_queue(QueueName="qa-main", Attributes={"VisibilityTimeout": "46"})
    sqs.create_queue(QueueName="qa-other")
    assert sqs.get_queue_url(QueueName="qa-main")["QueueUrl"] == url
    listed = sqs.list_queues(QueueNamePrefix="qa-")["QueueUrls"]
    assert listed == [url, f"{broker}/sqs/qa-other"]
    page = sqs.list_queues(QueueNamePrefix="qa-", MaxResults=1)
    assert page["QueueUrls"] == [url]
    rest = sqs.list_queues(QueueNamePrefix="qa-", MaxResults=1, NextToken=page["NextToken"])
    assert rest["QueueUrls"] == [f"{broker}/sqs/qa-other"] and "NextToken" not in rest
    for n in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=str(n), DelaySeconds=60 if n == 2 else 0)
    sqs.receive_message(QueueUrl=url)
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"ReceiveMessageWaitTimeSeconds": "3"})
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert {k: attrs[k] for k in ("VisibilityTimeout", "ReceiveMessageWaitTimeSeconds")} == {
        "VisibilityTimeout": "45", "ReceiveMessageWaitTimeSeconds": "3"
    }  # fmt: skip
    counts = [attrs[f"ApproximateNumberOf{k}"] for k in ("Messages", "MessagesNotVisible",
                                                          "MessagesDelayed")]  # fmt: skip
    assert counts == ["1", "1", "1"]
    assert attrs["QueueArn"] == "arn:aws:sqs:us-east-1:000000000000:qa-main"
    assert abs(int(attrs["CreatedTimestamp"]) - time.time()) < 60
    sqs.purge_queue(QueueUrl=url)
    assert http("GET", f"{broker}/stats")[1]["queues"].get("qa-main") is None
    sqs.delete_queue(QueueUrl=url)
    code, status = _code(sqs.get_queue_url, QueueName="qa-main")
    assert (code, status) == ("AWS.SimpleQueueService.NonExistentQueue", 400)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.send_message(QueueUrl=url, MessageBody="x")


def _in_thread(target: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        out["value"] = target()
        out["at"] = time.monotonic()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_long_poll__native_enqueue_wakes_a_parked_receive(sqs: Any, broker: str) -> None:
    url = sqs.create_queue(QueueName="wake-sqs")["QueueUrl"]
    thread, out = _in_thread(lambda: sqs.receive_message(QueueUrl=url, WaitTimeSeconds=15))
    time.sleep(1.0)  # parked
    assert thread.is_alive()
    sent = time.monotonic()
    assert http("POST", f"{broker}/jobs", {"payload": {"n": 1}, "queue": "wake-sqs"})[0] == 201
    thread.join(15)
    assert [m["Body"] for m in out["value"]["Messages"]] == ['{"n":1}']
    assert out["at"] - sent < 1.0


def test_long_poll__sqs_send_wakes_a_parked_native_claim(sqs: Any, broker: str) -> None:
    url = sqs.create_queue(QueueName="wake-native")["QueueUrl"]
    thread, out = _in_thread(
        lambda: http("GET", f"{broker}/jobs/next?queue=wake-native&wait_ms=15000", timeout=20)
    )
    time.sleep(1.0)
    assert thread.is_alive()
    sent = time.monotonic()
    attrs = {"k": {"DataType": "String", "StringValue": "v"}}
    sqs.send_message(QueueUrl=url, MessageBody="to a worker", MessageAttributes=attrs)
    thread.join(15)
    status, delivery = out["value"]
    assert status == 200
    assert delivery["task"]["payload"] == {
        "body": "to a worker", "attributes": {"k": {"DataType": "String", "StringValue": "v"}}
    }  # fmt: skip
    assert out["at"] - sent < 1.0


def test_long_poll__queue_wait_attribute_is_the_default(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="waits", Attributes={"ReceiveMessageWaitTimeSeconds": "2"})[
        "QueueUrl"
    ]
    started = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    assert 1.8 < time.monotonic() - started < 5
    started = time.monotonic()
    sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
    assert time.monotonic() - started < 1.5  # not the queue's 2 s


def test_visibility_lapse__receivable_again_at_once(sqs: Any, broker: str) -> None:
    url = sqs.create_queue(QueueName="lapse")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="again")
    first = sqs.receive_message(QueueUrl=url, VisibilityTimeout=1)["Messages"][0]
    started = time.monotonic()
    again = sqs.receive_message(
        QueueUrl=url, WaitTimeSeconds=10, MessageSystemAttributeNames=["ApproximateReceiveCount"]
    )["Messages"][0]
    waited = time.monotonic() - started
    assert again["MessageId"] == first["MessageId"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    assert 0.8 < waited < 2.0  # the lapse, then no retry backoff
    errors = [e["error"] for e in _task(broker, first["MessageId"])["errors"]]
    assert errors == ["lease expired"]


def test_change_visibility__zero_at_once__longer_keeps_it_hidden(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="visibility")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="v")
    held = sqs.receive_message(QueueUrl=url, VisibilityTimeout=1)["Messages"][0]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=held["ReceiptHandle"],
                                  VisibilityTimeout=30)  # fmt: skip
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=held["ReceiptHandle"],
                                  VisibilityTimeout=0)  # fmt: skip
    again = sqs.receive_message(QueueUrl=url)["Messages"]
    assert [m["MessageId"] for m in again] == [held["MessageId"]]


def test_redrive__out_of_receives__in_the_broker_dlq(sqs: Any, broker: str) -> None:
    policy = {"deadLetterTargetArn": "arn:aws:sqs:eu-west-1:123456789012:dlq", "maxReceiveCount": 2}
    url = sqs.create_queue(QueueName="redrive", Attributes={"RedrivePolicy": json.dumps(policy)})[
        "QueueUrl"
    ]
    message_id = sqs.send_message(QueueUrl=url, MessageBody="poison")["MessageId"]
    for _ in range(2):
        got = sqs.receive_message(QueueUrl=url, VisibilityTimeout=1, WaitTimeSeconds=5)
        assert [m["MessageId"] for m in got["Messages"]] == [message_id]
    wait_until(lambda: _task(broker, message_id)["state"] == "dead", 10, what="the DLQ")
    dead = http("GET", f"{broker}/dlq?queue=redrive")[1]["results"]
    assert [(t["id"], t["attempts"], t["max_attempts"]) for t in dead] == [(message_id, 2, 2)]
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
    assert http("POST", f"{broker}/dlq/{message_id}/requeue")[0] == 204
    back = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    assert [m["Body"] for m in back] == ["poison"]


def test_no_redrive__receives_unlimited(sqs: Any, broker: str) -> None:
    url = sqs.create_queue(QueueName="forever")["QueueUrl"]
    message_id = sqs.send_message(QueueUrl=url, MessageBody="x")["MessageId"]
    for n in range(1, 121):
        got = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0, AttributeNames=["All"])
        assert got["Messages"][0]["Attributes"]["ApproximateReceiveCount"] == str(n)
    task = _task(broker, message_id)
    assert (task["state"], task["max_attempts"], task["error_count"]) == ("ready", None, 100)


def test_batches__partial_failures_answered_per_entry(loose: Any) -> None:
    url = loose.create_queue(QueueName="batches")["QueueUrl"]
    sent = loose.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "ok-1", "MessageBody": "one"},
        {"Id": "late", "MessageBody": "two", "DelaySeconds": 901},
        {"Id": "bad_attr", "MessageBody": "x", "MessageAttributes": {"AWS.x": {
            "DataType": "String", "StringValue": "v"}}},
        {"Id": "ok-2", "MessageBody": "three"},
        {"Id": "empty", "MessageBody": ""},
    ])  # fmt: skip
    assert [s["Id"] for s in sent["Successful"]] == ["ok-1", "ok-2"]
    assert [s["MD5OfMessageBody"] for s in sent["Successful"]] == [_md5("one"), _md5("three")]
    failed = {f["Id"]: (f["Code"], f["SenderFault"]) for f in sent["Failed"]}
    assert failed == {
        "late": ("InvalidParameterValue", True), "bad_attr": ("InvalidParameterValue", True),
        "empty": ("MissingParameter", True),
    }  # fmt: skip
    got = loose.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == ["one", "three"]
    handles = [m["ReceiptHandle"] for m in got]
    changed = loose.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": "a", "ReceiptHandle": handles[0], "VisibilityTimeout": 60},
        {"Id": "b", "ReceiptHandle": "garbled", "VisibilityTimeout": 60},
        {"Id": "c", "ReceiptHandle": handles[1], "VisibilityTimeout": 43_201},
    ])  # fmt: skip
    assert [s["Id"] for s in changed["Successful"]] == ["a"]
    assert {f["Id"]: f["Code"] for f in changed["Failed"]} == {
        "b": "ReceiptHandleIsInvalid", "c": "InvalidParameterValue"
    }  # fmt: skip
    deleted = loose.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": "a", "ReceiptHandle": handles[0]}, {"Id": "b", "ReceiptHandle": "garbled"},
        {"Id": "c", "ReceiptHandle": handles[1]},
    ])  # fmt: skip
    assert [s["Id"] for s in deleted["Successful"]] == ["a", "c"]
    assert [(f["Id"], f["Code"]) for f in deleted["Failed"]] == [("b", "ReceiptHandleIsInvalid")]


@pytest.mark.parametrize(
    ("entries", "code"),
    [
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        ([{"Id": str(n), "MessageBody": "m"} for n in range(11)],
         "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
        ([{"Id": "a", "MessageBody": "m"}] * 2, "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
        ([{"Id": "a b", "MessageBody": "m"}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
        ([{"Id": str(n), "MessageBody": "x" * 110_000} for n in range(10)],
         "AWS.SimpleQueueService.BatchRequestTooLong"),
    ],
)  # fmt: skip
def test_batch__malformed_request__whole_call_refused(loose: Any, entries: list, code: str) -> None:
    url = loose.create_queue(QueueName="batch-refused")["QueueUrl"]
    assert _code(loose.send_message_batch, QueueUrl=url, Entries=entries) == (code, 400)


def test_bad_input__sqs_error_codes_as_boto3_surfaces_them(loose: Any) -> None:
    url = loose.create_queue(QueueName="bad-input")["QueueUrl"]
    cases = [
        (loose.receive_message, {"QueueUrl": url, "WaitTimeSeconds": 21}, "InvalidParameterValue"),
        (loose.receive_message, {"QueueUrl": url, "MaxNumberOfMessages": 11},
         "InvalidParameterValue"),
        (loose.receive_message, {"QueueUrl": url, "VisibilityTimeout": 43_201},
         "InvalidParameterValue"),
        (loose.send_message, {"QueueUrl": url, "MessageBody": "m", "DelaySeconds": 901},
         "InvalidParameterValue"),
        (loose.send_message, {"QueueUrl": url, "MessageBody": "x" * 1_048_577},
         "InvalidParameterValue"),
        (loose.send_message, {"QueueUrl": url, "MessageBody": "a\x00b"}, "InvalidMessageContents"),
        (loose.send_message, {"QueueUrl": url}, "MissingParameter"),
        (loose.send_message, {"MessageBody": "m"}, "MissingParameter"),
        (loose.delete_message, {"QueueUrl": url, "ReceiptHandle": "nope"},
         "ReceiptHandleIsInvalid"),
        (loose.get_queue_attributes, {"QueueUrl": url, "AttributeNames": ["Nope"]},
         "InvalidAttributeName"),
        (loose.set_queue_attributes, {"QueueUrl": url, "Attributes": {"DelaySeconds": "901"}},
         "InvalidAttributeValue"),
        (loose.create_queue, {"QueueName": "jobs.fifo"}, "InvalidParameterValue"),
        (loose.create_queue, {"QueueName": "jobs", "Attributes": {"FifoQueue": "true"}},
         "InvalidParameterValue"),
        (loose.create_queue, {"QueueName": "bad name"}, "InvalidParameterValue"),
        (loose.tag_queue, {"QueueUrl": url, "Tags": {"a": "b"}},
         "AWS.SimpleQueueService.UnsupportedOperation"),
        (loose.send_message, {"QueueUrl": f"{url}-missing", "MessageBody": "m"},
         "AWS.SimpleQueueService.NonExistentQueue"),
    ]  # fmt: skip
    for call, kwargs, code in cases:
        assert _code(call, **kwargs) == (code, 400), (call, kwargs)


def test_large_message__over_the_native_body_limit__accepted(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="large")["QueueUrl"]
    body = "é" * 524_288  # a full-size message, 1 MiB; 3 MiB once JSON-escaped in the request
    sent = sqs.send_message(QueueUrl=url, MessageBody=body)
    got = sqs.receive_message(QueueUrl=url)["Messages"][0]
    assert got["Body"] == body and got["MD5OfBody"] == sent["MD5OfMessageBody"] == _md5(body)


def test_interop__native_and_sqs_settle_each_others_messages(sqs: Any, broker: str) -> None:
    url = sqs.create_queue(QueueName="interop")["QueueUrl"]
    message_id = sqs.send_message(QueueUrl=url, MessageBody="from sqs")["MessageId"]
    status, delivery = http("GET", f"{broker}/jobs/next?queue=interop&wait_ms=0")
    assert status == 200 and delivery["task"]["id"] == message_id
    nack = f"{broker}/jobs/{message_id}/nack?lease_id={delivery['lease_id']}"
    assert http("POST", nack, {"error": "worker failed"})[0] == 204
    # No backoff for an SQS message: the sweeper's next tick makes it receivable.
    again = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"][0]
    assert (again["MessageId"], again["Body"]) == (message_id, "from sqs")
    sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    assert _task(broker, message_id)["state"] == "done"
    status, body = http("POST", f"{broker}/jobs", {"payload": "from native", "queue": "interop"})
    got = sqs.receive_message(QueueUrl=url)["Messages"][0]
    assert (got["MessageId"], got["Body"]) == (body["id"], "from native")
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])
    stats = http("GET", f"{broker}/stats")[1]
    assert stats["totals"]["nacked"] + stats["totals"]["reclaimed"] == (
        stats["totals"]["retried"] + stats["totals"]["buried"]
    )


def test_signatures__tokens_on__only_listed_keys_signing_right(
    broker: str, live_db_url: str, tmp_path: Path
) -> None:
    env = {"BROKER_API_TOKENS": "tok", "BROKER_SQS_CREDENTIALS": "AKIDGOOD:s3cret,AKIDTWO:other"}
    with gunicorn(live_db_url, tmp_path, "signed", WORKERS="1", **env) as base:
        good = client(base, key="AKIDGOOD", secret="s3cret")
        url = good.create_queue(QueueName="signed")["QueueUrl"]
        good.send_message(QueueUrl=url, MessageBody="signed")
        assert client(base, key="AKIDTWO", secret="other").receive_message(QueueUrl=url)["Messages"]
        unknown = client(base, key="AKIDNOPE", secret="s3cret")
        assert _code(unknown.list_queues) == ("InvalidClientTokenId", 403)
        wrong = client(base, key="AKIDGOOD", secret="wrong")
        assert _code(wrong.list_queues) == ("SignatureDoesNotMatch", 403)
        from botocore import UNSIGNED

        unsigned = client(base, signature_version=UNSIGNED)
        assert _code(unsigned.list_queues) == ("MissingAuthenticationToken", 403)
        # The native API keeps its bearer tokens; a signature is no token there.
        assert http("GET", f"{base}/stats")[0] == 401
        assert http("GET", f"{base}/stats", headers={"Authorization": "Bearer tok"})[0] == 200
        localhost = client(base.replace("127.0.0.1", "localhost"), key="AKIDGOOD", secret="s3cret")
        assert localhost.get_queue_url(QueueName="signed")["QueueUrl"].startswith(
            "http://localhost"
        )

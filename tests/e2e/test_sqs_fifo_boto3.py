"""FIFO queues and fair standard queues with the real boto3 client against gunicorn (two
processes) on PostgreSQL: what a script written for Amazon SQS does, unchanged."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import pytest

from tests.e2e.test_sqs_boto3 import _code, _task, broker, client, loose, sqs
from tests.procs import http

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
__all__ = ["broker", "loose", "sqs"]  # the fixtures this module uses, from the one it follows


def test_fifo__create_send_dedup_receive_in_order(sqs: Any, broker: str) -> None:
    url = sqs.create_queue(
        QueueName="orders.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attrs["FifoQueue"], attrs["ContentBasedDeduplication"]) == ("true", "true")
    status, setting = http("GET", f"{broker}/queues/orders.fifo")
    assert (status, setting["ordered"]) == (200, True)

    first = sqs.send_message(QueueUrl=url, MessageBody="a0", MessageGroupId="a")
    again = sqs.send_message(QueueUrl=url, MessageBody="a0", MessageGroupId="a")
    assert (again["MessageId"], again["SequenceNumber"]) == (
        first["MessageId"], first["SequenceNumber"],
    )  # fmt: skip
    batch = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "1", "MessageBody": "a1", "MessageGroupId": "a", "MessageDeduplicationId": "x1"},
        {"Id": "2", "MessageBody": "b0", "MessageGroupId": "b"},
        {"Id": "3", "MessageBody": "a2", "MessageGroupId": "a", "MessageDeduplicationId": "x1"},
    ])  # fmt: skip
    ids = {e["Id"]: e for e in batch["Successful"]}
    assert ids["3"]["MessageId"] == ids["1"]["MessageId"] and not batch.get("Failed")
    numbers = [int(first["SequenceNumber"]), int(ids["1"]["SequenceNumber"])]
    assert numbers == sorted(numbers) and numbers[0] < numbers[1]

    got = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10,
        MessageSystemAttributeNames=["MessageGroupId", "MessageDeduplicationId", "SequenceNumber"],
    )["Messages"]  # fmt: skip
    assert sorted(m["Body"] for m in got) == ["a0", "b0"]  # a1 waits for a0
    a0 = next(m for m in got if m["Body"] == "a0")
    assert a0["Attributes"] == {
        "MessageGroupId": "a", "SequenceNumber": first["SequenceNumber"],
        "MessageDeduplicationId": hashlib.sha256(b"a0").hexdigest(),
    }  # fmt: skip
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
    sqs.delete_message(QueueUrl=url, ReceiptHandle=a0["ReceiptHandle"])
    (a1,) = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
    assert (a1["Body"], a1["Attributes"]["MessageDeduplicationId"]) == ("a1", "x1")


def test_fifo__refusals_as_boto3_surfaces_them(loose: Any) -> None:
    url = loose.create_queue(QueueName="strict.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    message = {"QueueUrl": url, "MessageBody": "m"}
    cases = [
        ({**message, "MessageDeduplicationId": "d"}, "MissingParameter"),
        ({**message, "MessageGroupId": "g"}, "InvalidParameterValue"),
        ({**message, "MessageGroupId": "g", "MessageDeduplicationId": "d", "DelaySeconds": 3},
         "InvalidParameterValue"),
    ]  # fmt: skip
    for kwargs, code in cases:
        assert _code(loose.send_message, **kwargs) == (code, 400), kwargs
    standard = loose.create_queue(QueueName="plain")["QueueUrl"]
    assert _code(
        loose.send_message, QueueUrl=standard, MessageBody="m", MessageDeduplicationId="d"
    ) == ("InvalidParameterValue", 400)


def test_fifo__senders_racing_one_dedup_id__one_message(broker: str) -> None:
    """Threads, each with its own boto3 client, over two broker processes, all at once."""
    url = client(broker).create_queue(QueueName="race.fifo", Attributes={"FifoQueue": "true"})[
        "QueueUrl"
    ]
    senders = 10
    for round_ in range(3):
        clients = [client(broker) for _ in range(senders)]
        start = threading.Barrier(senders)
        answers: list[str] = []
        errors: list[BaseException] = []

        def send(
            c: Any,
            round_: int = round_,
            start: threading.Barrier = start,
            answers: list[str] = answers,
            errors: list[BaseException] = errors,
        ) -> None:
            try:
                start.wait(timeout=10)
                got = c.send_message(QueueUrl=url, MessageBody="m", MessageGroupId="g",
                                     MessageDeduplicationId=f"same-{round_}")  # fmt: skip
                answers.append(got["MessageId"])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=send, args=(c,)) for c in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert not errors and len(answers) == senders, errors
        assert len(set(answers)) == 1, answers
    status, listed = http("GET", f"{broker}/jobs?queue=race.fifo&limit=50")
    assert status == 200 and len(listed["results"]) == 3


def test_standard__fair_groups_are_keys(sqs: Any, broker: str) -> None:
    url = sqs.create_queue(QueueName="tenants")["QueueUrl"]
    status, setting = http("GET", f"{broker}/queues/tenants")
    assert (status, setting["fair"], setting["ordered"]) == (200, True, False)
    for n in range(3):
        sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "MessageBody": f"big {n}.{i}", "MessageGroupId": "big"}
            for i in range(10)
        ])  # fmt: skip
    small = sqs.send_message(QueueUrl=url, MessageBody="small", MessageGroupId="small")
    assert "SequenceNumber" not in small
    assert _task(broker, small["MessageId"])["key"] == "small"
    got = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=2, MessageSystemAttributeNames=["MessageGroupId"]
    )["Messages"]
    assert sorted(m["Attributes"]["MessageGroupId"] for m in got) == ["big", "small"]

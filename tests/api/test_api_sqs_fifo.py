"""SQS FIFO queues and fair standard queues (Django's test client, as boto3 sends; any database)."""

from __future__ import annotations

import hashlib
import json

import pytest

from broker import queues, sweeper
from broker.models import SqsDedup, SqsMessage, SqsQueue, Task
from tests.api.conftest import Sqs
from tests.conftest import Clock

pytestmark = pytest.mark.django_db

FIFO = {"FifoQueue": "true"}


def _ok(sqs: Sqs, action: str, body: dict) -> dict:
    status, answer, _ = sqs(action, body)
    assert status == 200, answer
    return answer


def _refused(sqs: Sqs, action: str, body: dict) -> tuple[str, str]:
    status, answer, _ = sqs(action, body)
    assert status == 400, answer
    return answer["__type"].rpartition("#")[2], answer["message"]


def _send(sqs: Sqs, url: str, body: str = "m", **extra) -> dict:
    return _ok(sqs, "SendMessage", {"QueueUrl": url, "MessageBody": body, **extra})


def _receive(sqs: Sqs, url: str, **extra) -> list[dict]:
    return _ok(sqs, "ReceiveMessage", {"QueueUrl": url, **extra}).get("Messages", [])


def _delete(sqs: Sqs, url: str, message: dict) -> None:
    _ok(sqs, "DeleteMessage", {"QueueUrl": url, "ReceiptHandle": message["ReceiptHandle"]})


# -- CreateQueue, attributes -----------------------------------------------------------------------


def test_create__fifo__an_ordered_queue_reporting_its_attributes(sqs: Sqs, queue_url) -> None:
    url = queue_url("jobs.fifo", **FIFO, ContentBasedDeduplication="true")
    assert url.endswith("/sqs/jobs.fifo")
    setting = queues.describe("jobs.fifo")
    assert (setting["ordered"], setting["fair"]) == (True, False)
    got = _ok(sqs, "GetQueueAttributes", {"QueueUrl": url, "AttributeNames": ["All"]})
    attrs = got["Attributes"]
    assert (attrs["FifoQueue"], attrs["ContentBasedDeduplication"]) == ("true", "true")
    asked = {"QueueUrl": url, "AttributeNames": ["FifoQueue", "ContentBasedDeduplication"]}
    assert _ok(sqs, "GetQueueAttributes", asked)["Attributes"] == {
        "FifoQueue": "true", "ContentBasedDeduplication": "true",
    }  # fmt: skip


def test_create__again_same_attributes__same_url_differing__exists(sqs: Sqs, queue_url) -> None:
    url = queue_url("a.fifo", **FIFO)
    assert queue_url("a.fifo", **FIFO) == url
    code, message = _refused(
        sqs, "CreateQueue",
        {"QueueName": "a.fifo", "Attributes": {**FIFO, "ContentBasedDeduplication": "true"}},
    )  # fmt: skip
    assert code == "QueueNameExists" and message.endswith("ContentBasedDeduplication")


def test_create__the_broker_s_own_fixed_attributes__accepted_and_reported(
    sqs: Sqs, queue_url
) -> None:
    """What infrastructure tools send as they are: the one value the broker has is accepted,
    set again, and reported under All (of a FIFO queue, its scope and throughput too)."""
    fixed = {"DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue"}
    url = queue_url("t.fifo", **FIFO, **fixed, SqsManagedSseEnabled="false")
    _ok(sqs, "SetQueueAttributes", {"QueueUrl": url, "Attributes": fixed})
    attrs = _ok(sqs, "GetQueueAttributes", {"QueueUrl": url, "AttributeNames": ["All"]})
    assert {k: attrs["Attributes"][k] for k in (*fixed, "SqsManagedSseEnabled")} == {
        **fixed, "SqsManagedSseEnabled": "false",
    }  # fmt: skip
    standard = queue_url("t", SqsManagedSseEnabled="false")
    attrs = _ok(sqs, "GetQueueAttributes", {"QueueUrl": standard, "AttributeNames": ["All"]})
    assert attrs["Attributes"]["SqsManagedSseEnabled"] == "false"
    assert not set(fixed) & set(attrs["Attributes"])


def test_content_based_deduplication__set_and_reported(sqs: Sqs, queue_url) -> None:
    url = queue_url("c.fifo", **FIFO)
    asked = {"QueueUrl": url, "AttributeNames": ["ContentBasedDeduplication"]}
    assert _ok(sqs, "GetQueueAttributes", asked)["Attributes"] == {
        "ContentBasedDeduplication": "false"
    }
    change = {"QueueUrl": url, "Attributes": {"ContentBasedDeduplication": "true"}}
    _ok(sqs, "SetQueueAttributes", change)
    assert SqsQueue.objects.get(name="c.fifo").content_based_dedup is True
    assert _ok(sqs, "GetQueueAttributes", asked)["Attributes"] == {
        "ContentBasedDeduplication": "true"
    }


@pytest.mark.parametrize(
    ("name", "attributes", "code"),
    [
        ("x.fifo", {}, "InvalidParameterValue"),
        ("x.fifo", {"FifoQueue": "false"}, "InvalidParameterValue"),
        ("x", FIFO, "InvalidParameterValue"),
        ("x.y.fifo", FIFO, "InvalidParameterValue"),
        ("x" * 60 + ".fifo", FIFO, "InvalidParameterValue"),
        ("x.fifo", {"FifoQueue": "yes"}, "InvalidAttributeValue"),
        ("x.fifo", {**FIFO, "ContentBasedDeduplication": "1"}, "InvalidAttributeValue"),
        ("x", {"ContentBasedDeduplication": "true"}, "InvalidAttributeName"),
        ("x.fifo", {**FIFO, "DeduplicationScope": "messageGroup"}, "InvalidAttributeValue"),
        ("x.fifo", {**FIFO, "FifoThroughputLimit": "perMessageGroupId"}, "InvalidAttributeValue"),
        ("x", {"DeduplicationScope": "queue"}, "InvalidAttributeName"),
        ("x", {"SqsManagedSseEnabled": "true"}, "InvalidAttributeValue"),
        ("x", {"KmsMasterKeyId": "alias/aws/sqs"}, "InvalidAttributeName"),
    ],
)
def test_create__refused(sqs: Sqs, name: str, attributes: dict, code: str) -> None:
    body = {"QueueName": name, "Attributes": attributes}
    assert _refused(sqs, "CreateQueue", body)[0] == code
    assert not SqsQueue.objects.exists()


def test_set_attributes__fifo_queue_or_content_dedup_on_standard__refused(
    sqs: Sqs, queue_url
) -> None:
    url = queue_url("s")
    for attributes in ({"FifoQueue": "true"}, {"ContentBasedDeduplication": "true"}):
        body = {"QueueUrl": url, "Attributes": attributes}
        assert _refused(sqs, "SetQueueAttributes", body)[0] == "InvalidAttributeName"
    got = _ok(sqs, "GetQueueAttributes", {"QueueUrl": url, "AttributeNames": ["All"]})
    assert "FifoQueue" not in got["Attributes"]
    assert "ContentBasedDeduplication" not in got["Attributes"]


# -- SendMessage(Batch) ----------------------------------------------------------------------------


def test_send__group_is_the_key__sequence_numbers_increase(sqs: Sqs, queue_url) -> None:
    url = queue_url("o.fifo", **FIFO)
    first = _send(sqs, url, "a", MessageGroupId="g1", MessageDeduplicationId="d1")
    second = _send(sqs, url, "b", MessageGroupId="g1", MessageDeduplicationId="d2")
    task = Task.objects.get(pk=int(first["MessageId"]))
    assert (task.key, task.queue) == ("g1", "o.fifo")
    # The payload is API.md's {"body", "attributes"}; the deduplication id is kept beside it.
    assert json.loads(task.payload) == {"body": "a", "attributes": {}}
    assert SqsMessage.objects.get(task_id=task.pk).deduplication_id == "d1"
    assert first["SequenceNumber"] == f"{task.pk:020d}"
    assert int(second["SequenceNumber"]) > int(first["SequenceNumber"])
    assert len(second["SequenceNumber"]) == 20


def test_send__duplicate_within_window__first_id_nothing_enqueued(sqs: Sqs, queue_url) -> None:
    url = queue_url("d.fifo", **FIFO)
    first = _send(sqs, url, "a", MessageGroupId="g", MessageDeduplicationId="same")
    again = _send(sqs, url, "other body", MessageGroupId="h", MessageDeduplicationId="same")
    assert (again["MessageId"], again["SequenceNumber"]) == (
        first["MessageId"], first["SequenceNumber"],
    )  # fmt: skip
    assert again["MD5OfMessageBody"] == hashlib.md5(b"other body").hexdigest()  # noqa: S324
    assert Task.objects.count() == 1
    # The id is the queue's: another FIFO queue takes it.
    other = queue_url("e.fifo", **FIFO)
    assert (
        _send(sqs, other, MessageGroupId="g", MessageDeduplicationId="same")["MessageId"]
        != (first["MessageId"])
    )


def test_send__duplicate_after_the_window__enqueued_again(
    sqs: Sqs, queue_url, clock: Clock
) -> None:
    url = queue_url("w.fifo", **FIFO)
    first = _send(sqs, url, MessageGroupId="g", MessageDeduplicationId="d")
    clock.advance(299_000)
    assert _send(sqs, url, MessageGroupId="g", MessageDeduplicationId="d") == first
    clock.advance(2_000)
    again = _send(sqs, url, MessageGroupId="g", MessageDeduplicationId="d")
    assert again["MessageId"] != first["MessageId"]
    assert Task.objects.count() == 2
    # The new one starts a window of its own.
    clock.advance(200_000)
    assert _send(sqs, url, MessageGroupId="g", MessageDeduplicationId="d") == again


def test_send__content_based__sha256_of_the_body(sqs: Sqs, queue_url) -> None:
    url = queue_url("cb.fifo", **FIFO, ContentBasedDeduplication="true")
    first = _send(sqs, url, "hello", MessageGroupId="g")
    assert _send(sqs, url, "hello", MessageGroupId="other")["MessageId"] == first["MessageId"]
    assert _send(sqs, url, "hello!", MessageGroupId="g")["MessageId"] != first["MessageId"]
    # An explicit id wins over the body's.
    explicit = _send(sqs, url, "hello", MessageGroupId="g", MessageDeduplicationId="x")
    assert explicit["MessageId"] != first["MessageId"]
    task = Task.objects.get(pk=int(first["MessageId"]))
    dedup_id = SqsMessage.objects.get(task_id=task.pk).deduplication_id
    assert dedup_id == hashlib.sha256(b"hello").hexdigest()


@pytest.mark.parametrize(
    ("extra", "code", "names"),
    [
        ({"MessageDeduplicationId": "d"}, "MissingParameter", "MessageGroupId"),
        ({"MessageGroupId": "g"}, "InvalidParameterValue", "ContentBasedDeduplication"),
        ({"MessageGroupId": "g", "MessageDeduplicationId": "d", "DelaySeconds": 5},
         "InvalidParameterValue", "DelaySeconds"),
        ({"MessageGroupId": "g", "MessageDeduplicationId": "d", "DelaySeconds": 0},
         "InvalidParameterValue", "DelaySeconds"),
        ({"MessageGroupId": "g h", "MessageDeduplicationId": "d"},
         "InvalidParameterValue", "MessageGroupId"),
        ({"MessageGroupId": "g", "MessageDeduplicationId": "d" * 129},
         "InvalidParameterValue", "MessageDeduplicationId"),
    ],
)  # fmt: skip
def test_send__fifo_refused(sqs: Sqs, queue_url, extra: dict, code: str, names: str) -> None:
    url = queue_url("r.fifo", **FIFO)
    got, message = _refused(sqs, "SendMessage", {"QueueUrl": url, "MessageBody": "m", **extra})
    assert (got, names in message) == (code, True)
    assert not Task.objects.exists() and not SqsDedup.objects.exists()


def test_send__standard_queue__deduplication_id_refused(sqs: Sqs, queue_url) -> None:
    url = queue_url("std")
    body = {"QueueUrl": url, "MessageBody": "m", "MessageDeduplicationId": "d"}
    assert _refused(sqs, "SendMessage", body)[0] == "InvalidParameterValue"


def test_send_batch__fifo__each_entry_deduplicated_bad_ones_failed(sqs: Sqs, queue_url) -> None:
    url = queue_url("b.fifo", **FIFO)
    before = _send(sqs, url, "x", MessageGroupId="g", MessageDeduplicationId="old")
    entries = [
        {"Id": "a", "MessageBody": "1", "MessageGroupId": "g", "MessageDeduplicationId": "n1"},
        {"Id": "b", "MessageBody": "2", "MessageGroupId": "g", "MessageDeduplicationId": "old"},
        {"Id": "c", "MessageBody": "3", "MessageGroupId": "g", "MessageDeduplicationId": "n1"},
        {"Id": "d", "MessageBody": "4", "MessageDeduplicationId": "n2"},
        {"Id": "e", "MessageBody": "5", "MessageGroupId": "h", "MessageDeduplicationId": "n3"},
    ]
    got = _ok(sqs, "SendMessageBatch", {"QueueUrl": url, "Entries": entries})
    ids = {e["Id"]: e["MessageId"] for e in got["Successful"]}
    assert [(f["Id"], f["Code"]) for f in got["Failed"]] == [("d", "MissingParameter")]
    assert ids["b"] == before["MessageId"]
    assert ids["c"] == ids["a"] != ids["e"]
    assert all(e["SequenceNumber"] == f"{int(e['MessageId']):020d}" for e in got["Successful"])
    assert sorted(Task.objects.values_list("payload", flat=True)) == sorted(
        json.dumps({"body": b, "attributes": {}}, separators=(",", ":")) for b in ("x", "1", "5")
    )
    kept = SqsMessage.objects.values_list("task_id", "deduplication_id")
    assert sorted(kept) == sorted(
        [(int(before["MessageId"]), "old"), (int(ids["a"]), "n1"), (int(ids["e"]), "n3")]
    )


# -- ReceiveMessage --------------------------------------------------------------------------------


def test_receive__fifo__a_group_in_order_none_while_one_in_flight(sqs: Sqs, queue_url) -> None:
    url = queue_url("r.fifo", **FIFO)
    for n in range(3):
        _send(sqs, url, f"a{n}", MessageGroupId="a", MessageDeduplicationId=f"a{n}")
    _send(sqs, url, "b0", MessageGroupId="b", MessageDeduplicationId="b0")
    first = _receive(sqs, url)
    assert [m["Body"] for m in first] == ["a0"]
    second = _receive(sqs, url)
    assert [m["Body"] for m in second] == ["b0"]  # a1 waits for a0
    assert _receive(sqs, url) == []
    _delete(sqs, url, first[0])
    bodies = []
    while got := _receive(sqs, url, MaxNumberOfMessages=10):
        bodies += [m["Body"] for m in got]
        for m in got:
            _delete(sqs, url, m)
    assert bodies == ["a1", "a2"]


def test_receive__fifo__system_attributes_when_asked(sqs: Sqs, queue_url) -> None:
    url = queue_url("at.fifo", **FIFO)
    sent = _send(sqs, url, "x", MessageGroupId="grp", MessageDeduplicationId="dd")
    (m,) = _receive(sqs, url, VisibilityTimeout=0, AttributeNames=["All"])
    assert {k: m["Attributes"][k] for k in ("MessageGroupId", "MessageDeduplicationId",
                                            "SequenceNumber")} == {
        "MessageGroupId": "grp", "MessageDeduplicationId": "dd",
        "SequenceNumber": sent["SequenceNumber"],
    }  # fmt: skip
    (m,) = _receive(
        sqs, url, VisibilityTimeout=0,
        MessageSystemAttributeNames=["SequenceNumber", "MessageDeduplicationId"],
    )  # fmt: skip
    assert m["Attributes"] == {"SequenceNumber": sent["SequenceNumber"],
                               "MessageDeduplicationId": "dd"}  # fmt: skip
    (m,) = _receive(sqs, url)
    assert "Attributes" not in m


# -- fair standard queues --------------------------------------------------------------------------


def test_standard__created_fair__group_is_the_key_and_comes_back(sqs: Sqs, queue_url) -> None:
    url = queue_url("f")
    assert (queues.describe("f")["fair"], queues.describe("f")["ordered"]) == (True, False)
    pk = _send(sqs, url, "x", MessageGroupId="tenant-1")["MessageId"]
    plain = _send(sqs, url, "y")
    assert "SequenceNumber" not in plain
    assert Task.objects.get(pk=int(pk)).key == "tenant-1"
    assert Task.objects.get(pk=int(plain["MessageId"])).key is None
    got = _receive(sqs, url, MaxNumberOfMessages=10, AttributeNames=["All"])
    groups = {m["Body"]: m["Attributes"].get("MessageGroupId") for m in got}
    assert groups == {"x": "tenant-1", "y": None}
    assert all("SequenceNumber" not in m["Attributes"] for m in got)


def test_standard__one_groups_backlog_does_not_hold_back_another(sqs: Sqs, queue_url) -> None:
    url = queue_url("fair")
    entries = [{"Id": f"e{n}", "MessageBody": f"big{n}", "MessageGroupId": "big"}
               for n in range(10)]  # fmt: skip
    for _ in range(3):
        _ok(sqs, "SendMessageBatch", {"QueueUrl": url, "Entries": entries})
    _send(sqs, url, "small", MessageGroupId="small")
    got = _receive(sqs, url, MaxNumberOfMessages=2)
    assert sorted(m["Body"] for m in got) == ["big0", "small"]


# -- the deduplication ids' lifetime ---------------------------------------------------------------


def test_sweeper__prunes_expired_ids_only(sqs: Sqs, queue_url, clock: Clock) -> None:
    url = queue_url("p.fifo", **FIFO)
    _send(sqs, url, MessageGroupId="g", MessageDeduplicationId="old")
    clock.advance(200_000)
    _send(sqs, url, MessageGroupId="g", MessageDeduplicationId="new")
    clock.advance(101_000)
    sweeper.sweep_once()
    assert list(SqsDedup.objects.values_list("dedup_id", flat=True)) == ["new"]


def test_delete_queue__forgets_its_ids(sqs: Sqs, queue_url) -> None:
    url = queue_url("q.fifo", **FIFO)
    first = _send(sqs, url, MessageGroupId="g", MessageDeduplicationId="d")
    _ok(sqs, "DeleteQueue", {"QueueUrl": url})
    assert not SqsDedup.objects.exists()
    url = queue_url("q.fifo", **FIFO)
    again = _send(sqs, url, MessageGroupId="g", MessageDeduplicationId="d")
    assert again["MessageId"] != first["MessageId"]


def test_sweeper__prunes_a_backlog_in_batches(sqs: Sqs, queue_url, clock: Clock) -> None:
    url = queue_url("bl.fifo", **FIFO)
    entries = [{"Id": f"e{i}", "MessageBody": str(i), "MessageGroupId": "g"} for i in range(10)]
    for n in range(3):
        for entry in entries:
            entry["MessageDeduplicationId"] = f"{n}-{entry['Id']}"
        _ok(sqs, "SendMessageBatch", {"QueueUrl": url, "Entries": entries})
    clock.advance(301_000)
    sweeper.sweep_once(batch=4)
    assert not SqsDedup.objects.exists()

"""SQS actions on the broker's own queues and moves (Django's test client; any database)."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from broker import queue
from broker.models import SqsMessage, SqsQueue, Task
from broker.queue import NewTask
from broker.sqs import extras
from broker.states import State
from tests.api.conftest import Sqs

pytestmark = pytest.mark.django_db


def _code(sqs: Sqs, action: str, body: dict) -> str:
    status, answer, _ = sqs(action, body)
    assert status >= 400, answer
    return answer["__type"].rpartition("#")[2]


def _send(sqs: Sqs, url: str, body: str = "m", **extra) -> str:
    status, answer, _ = sqs("SendMessage", {"QueueUrl": url, "MessageBody": body, **extra})
    assert status == 200, answer
    return answer["MessageId"]


def _receive(sqs: Sqs, url: str, **extra) -> list[dict]:
    status, answer, _ = sqs("ReceiveMessage", {"QueueUrl": url, **extra})
    assert status == 200, answer
    return answer.get("Messages", [])


def test_send__a_task_with_sqs_payload_no_backoff_unlimited(sqs: Sqs, queue_url) -> None:
    url = queue_url("s", DelaySeconds="0")
    attrs = {"a": {"DataType": "String", "StringValue": "v"}}
    pk = _send(sqs, url, "hi", MessageAttributes=attrs)
    task = Task.objects.get(pk=int(pk))
    assert json.loads(task.payload) == {"body": "hi", "attributes": attrs}
    assert (task.queue, task.state, task.max_attempts, task.backoff) == ("s", "ready", None, False)


def test_send__redrive_policy__max_attempts_and_queue_delay(sqs: Sqs, queue_url) -> None:
    policy = json.dumps(
        {"deadLetterTargetArn": "arn:aws:sqs:us-east-1:1:dlq", "maxReceiveCount": 4}
    )
    url = queue_url("r", RedrivePolicy=policy, DelaySeconds="60")
    task = Task.objects.get(pk=int(_send(sqs, url)))
    assert (task.max_attempts, task.state) == (4, State.DELAYED)
    assert Task.objects.get(pk=int(_send(sqs, url, DelaySeconds=0))).state == State.READY


@pytest.mark.parametrize("action", ["CreateQueue", "SetQueueAttributes"])
def test_redrive_policy__nested_past_the_parser__invalid_attribute_value(
    sqs: Sqs, queue_url, action: str
) -> None:
    nested = "[" * 100_000 + "]" * 100_000
    body = {"QueueName": "deep", "Attributes": {"RedrivePolicy": nested}}
    if action == "SetQueueAttributes":
        body = {"QueueUrl": queue_url("deep"), "Attributes": body["Attributes"]}
    status, answer, _ = sqs(action, body)
    assert (status, answer["__type"]) == (400, "com.amazonaws.sqs#InvalidAttributeValue")
    assert "not a JSON map" in answer["message"]


def test_receive__visibility_zero__received_and_ready_again(sqs: Sqs, queue_url) -> None:
    url = queue_url("v")
    _send(sqs, url)
    first = _receive(sqs, url, VisibilityTimeout=0, AttributeNames=["All"])
    second = _receive(sqs, url, AttributeNames=["ApproximateReceiveCount"])
    assert [m["Attributes"]["ApproximateReceiveCount"] for m in first + second] == ["1", "2"]


def test_receive__after_a_native_checkpoint__carries_it_when_asked(sqs: Sqs, queue_url) -> None:
    url = queue_url("cp")
    pk = int(_send(sqs, url))
    first = _receive(sqs, url, AttributeNames=["All"])[0]
    assert "Checkpoint" not in first["Attributes"]
    held = Task.objects.get(pk=pk)  # a native worker reports under the receive's lease
    queue.progress(pk, lease_id=held.lease_id, report=queue.Report(checkpoint='{"row":7}'))
    queue.release(pk, lease_id=held.lease_id)  # the visibility timeout lapsed, say
    again = _receive(sqs, url, MessageSystemAttributeNames=["Checkpoint"])[0]
    assert again["Attributes"] == {"Checkpoint": '{"row":7}'}
    queue.release(pk, lease_id=Task.objects.get(pk=pk).lease_id)
    plain = _receive(sqs, url, AttributeNames=["SentTimestamp"])[0]
    assert list(plain["Attributes"]) == ["SentTimestamp"]


def test_delete__stale_handle__succeeds_deletes_nothing(sqs: Sqs, queue_url) -> None:
    url = queue_url("d")
    pk = int(_send(sqs, url))
    old = _receive(sqs, url, VisibilityTimeout=0)[0]["ReceiptHandle"]
    new = _receive(sqs, url)[0]["ReceiptHandle"]
    assert sqs("DeleteMessage", {"QueueUrl": url, "ReceiptHandle": old})[0] == 200
    assert Task.objects.get(pk=pk).state == State.HANDED_OUT
    assert sqs("DeleteMessage", {"QueueUrl": url, "ReceiptHandle": new})[0] == 200
    assert Task.objects.get(pk=pk).state == State.DONE


def _delete(sqs: Sqs, url: str, handle: str) -> None:
    status, answer, _ = sqs("DeleteMessage", {"QueueUrl": url, "ReceiptHandle": handle})
    assert status == 200, answer


def test_delete__latest_handle_after_a_receive_with_visibility_zero__deleted(
    sqs: Sqs, queue_url
) -> None:
    url = queue_url("z")
    pk = int(_send(sqs, url))
    handle = _receive(sqs, url, VisibilityTimeout=0)[0]["ReceiptHandle"]
    before = queue.stats()
    _delete(sqs, url, handle)
    assert Task.objects.get(pk=pk).state == State.DONE
    after = queue.stats()
    assert after["totals"]["acked"] == before["totals"]["acked"] + 1
    assert after["gauges"]["ready"] == before["gauges"]["ready"] - 1
    assert _receive(sqs, url) == []


@pytest.mark.parametrize("redrive", [False, True])
def test_delete__latest_handle_after_the_visibility_timeout_lapsed__deleted(
    sqs: Sqs, queue_url, clock, redrive: bool
) -> None:
    policy = {"deadLetterTargetArn": "arn:aws:sqs:us-east-1:1:dlq", "maxReceiveCount": 5}
    url = queue_url("l", **({"RedrivePolicy": json.dumps(policy)} if redrive else {}))
    pk = int(_send(sqs, url))
    handle = _receive(sqs, url, VisibilityTimeout=1)[0]["ReceiptHandle"]
    clock.advance(1500)
    assert queue.reclaim_expired() == 1
    assert Task.objects.get(pk=pk).state == State.READY
    _delete(sqs, url, handle)
    assert Task.objects.get(pk=pk).state == State.DONE


def test_delete__batch_of_lapsed_latest_handles__deleted(sqs: Sqs, queue_url) -> None:
    url = queue_url("b")
    pks = {int(_send(sqs, url, str(i))) for i in range(3)}
    got = _receive(sqs, url, VisibilityTimeout=0, MaxNumberOfMessages=3)
    entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
    status, answer, _ = sqs("DeleteMessageBatch", {"QueueUrl": url, "Entries": entries})
    assert status == 200 and len(answer["Successful"]) == 3 and answer["Failed"] == []
    assert set(Task.objects.filter(state=State.DONE).values_list("pk", flat=True)) == pks


def test_delete__lapsed_handle_of_a_native_task_in_backoff__deleted(
    sqs: Sqs, enqueue, clock
) -> None:
    pk = int(enqueue(queue="native-b", payload={"n": 1}))
    url = sqs("GetQueueUrl", {"QueueName": "native-b"})[1]["QueueUrl"]
    handle = _receive(sqs, url, VisibilityTimeout=1)[0]["ReceiptHandle"]
    clock.advance(1500)
    assert queue.reclaim_expired() == 1
    assert Task.objects.get(pk=pk).state == State.DELAYED  # a native task backs off
    _delete(sqs, url, handle)
    assert Task.objects.get(pk=pk).state == State.DONE


@pytest.mark.parametrize("lapse", ["visibility timeout", "visibility zero"])
def test_delete__latest_handle_of_the_last_receive__deleted_out_of_the_dlq(
    sqs: Sqs, queue_url, clock, lapse: str
) -> None:
    policy = {"deadLetterTargetArn": "arn:aws:sqs:us-east-1:1:dlq", "maxReceiveCount": 1}
    url = queue_url("last", RedrivePolicy=json.dumps(policy))
    pk = int(_send(sqs, url))
    if lapse == "visibility zero":
        handle = _receive(sqs, url, VisibilityTimeout=0)[0]["ReceiptHandle"]
    else:
        handle = _receive(sqs, url, VisibilityTimeout=1)[0]["ReceiptHandle"]
        clock.advance(1500)
        assert queue.reclaim_expired() == 1
    assert Task.objects.get(pk=pk).state == State.DEAD  # out of receives: dead-lettered
    before = queue.stats()
    _delete(sqs, url, handle)
    assert Task.objects.get(pk=pk).state == State.DONE
    after = queue.stats()
    assert after["totals"]["acked"] == before["totals"]["acked"] + 1
    assert after["gauges"]["dead"] == before["gauges"]["dead"] - 1


def test_delete__latest_handle_of_a_native_task_nacked_to_the_dlq__deletes_nothing(
    sqs: Sqs, enqueue
) -> None:
    pk = int(enqueue(queue="native-n", payload={"n": 1}, max_attempts=1))
    url = sqs("GetQueueUrl", {"QueueName": "native-n"})[1]["QueueUrl"]
    handle = _receive(sqs, url)[0]["ReceiptHandle"]
    held = Task.objects.get(pk=pk)
    queue.nack(pk, lease_id=held.lease_id, error="boom")  # a worker failed it: no lapse
    assert Task.objects.get(pk=pk).state == State.DEAD
    _delete(sqs, url, handle)
    assert Task.objects.get(pk=pk).state == State.DEAD


def test_delete__handle_of_a_message_requeued_from_the_dlq__deletes_nothing(
    sqs: Sqs, queue_url, clock
) -> None:
    policy = {"deadLetterTargetArn": "arn:aws:sqs:us-east-1:1:dlq", "maxReceiveCount": 1}
    url = queue_url("dl", RedrivePolicy=json.dumps(policy))
    pk = int(_send(sqs, url))
    handle = _receive(sqs, url, VisibilityTimeout=1)[0]["ReceiptHandle"]
    clock.advance(1500)
    queue.reclaim_expired()
    assert Task.objects.get(pk=pk).state == State.DEAD
    queue.requeue(pk)
    _delete(sqs, url, handle)
    assert Task.objects.get(pk=pk).state == State.READY


def test_delete__handle_of_another_queue__receipt_handle_is_invalid(sqs: Sqs, queue_url) -> None:
    a, b = queue_url("a"), queue_url("b")
    _send(sqs, a)
    handle = _receive(sqs, a)[0]["ReceiptHandle"]
    body = {"QueueUrl": b, "ReceiptHandle": handle}
    assert _code(sqs, "DeleteMessage", body) == "ReceiptHandleIsInvalid"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("5", "Must be an integer."),
        (1.5, "Must be an integer."),
        (901, "Must be between 0 and 900"),
    ],
)
def test_send__delay_not_an_integer_in_range__invalid_saying_which(
    sqs: Sqs, queue_url, value, reason: str
) -> None:
    url = queue_url("d")
    status, answer, _ = sqs(
        "SendMessage", {"QueueUrl": url, "MessageBody": "m", "DelaySeconds": value}
    )
    assert (status, answer["__type"]) == (400, "com.amazonaws.sqs#InvalidParameterValue")
    assert "DelaySeconds" in answer["message"] and reason in answer["message"]
    assert (
        sqs("GetQueueAttributes", {"QueueUrl": url, "AttributeNames": ["All"]})[1]["Attributes"][
            "ApproximateNumberOfMessages"
        ]
        == "0"
    )


def test_change_visibility__errors_by_state(sqs: Sqs, queue_url) -> None:
    url = queue_url("c")
    _send(sqs, url)
    handle = _receive(sqs, url)[0]["ReceiptHandle"]
    body = {"QueueUrl": url, "ReceiptHandle": handle, "VisibilityTimeout": 0}
    assert sqs("ChangeMessageVisibility", body)[0] == 200
    assert _code(sqs, "ChangeMessageVisibility", body) == "MessageNotInflight"
    newer = _receive(sqs, url)[0]["ReceiptHandle"]
    assert _code(sqs, "ChangeMessageVisibility", body) == "InvalidParameterValue"
    sqs("DeleteMessage", {"QueueUrl": url, "ReceiptHandle": newer})
    body["ReceiptHandle"] = newer
    assert _code(sqs, "ChangeMessageVisibility", body) == "InvalidParameterValue"
    assert _code(sqs, "ChangeMessageVisibility", {**body, "ReceiptHandle": "x"}) == (
        "ReceiptHandleIsInvalid"
    )


def test_change_visibility__extends_the_lease(sqs: Sqs, queue_url) -> None:
    url = queue_url("e")
    pk = int(_send(sqs, url))
    handle = _receive(sqs, url, VisibilityTimeout=10)[0]["ReceiptHandle"]
    before = Task.objects.get(pk=pk).lease_deadline
    body = {"QueueUrl": url, "ReceiptHandle": handle, "VisibilityTimeout": 43_200}
    assert sqs("ChangeMessageVisibility", body)[0] == 200
    assert (Task.objects.get(pk=pk).lease_deadline - before).total_seconds() > 43_000


def test_native_queue_with_live_tasks__known_to_sqs(sqs: Sqs, enqueue) -> None:
    enqueue(queue="native", payload={"n": 1})
    status, answer, _ = sqs("GetQueueUrl", {"QueueName": "native"})
    assert status == 200, answer
    assert [m["Body"] for m in _receive(sqs, answer["QueueUrl"])] == ['{"n":1}']
    assert SqsQueue.objects.filter(name="native").exists()


def test_native_queue_with_settings_only__known_to_sqs(sqs: Sqs, api_client) -> None:
    body = '{"max_in_flight": 2}'
    assert api_client.patch("/queues/set", body, content_type="application/json").status_code == 200
    status, answer, _ = sqs("GetQueueUrl", {"QueueName": "set"})
    assert status == 200, answer
    assert answer["QueueUrl"].endswith("/sqs/set")
    assert sqs("ListQueues", {"QueueNamePrefix": "se"})[1]["QueueUrls"] == [answer["QueueUrl"]]
    assert _code(sqs, "GetQueueUrl", {"QueueName": "unset"}) == "QueueDoesNotExist"


def test_native_string_payload__body_is_the_string(sqs: Sqs, enqueue) -> None:
    enqueue(queue="strings", payload="plain text")
    url = sqs("GetQueueUrl", {"QueueName": "strings"})[1]["QueueUrl"]
    assert [m["Body"] for m in _receive(sqs, url)] == ["plain text"]


def test_delete_queue__live_cancelled_dead_kept_name_forgotten(sqs: Sqs, queue_url) -> None:
    url = queue_url("gone", RedrivePolicy='{"deadLetterTargetArn": "a", "maxReceiveCount": 1}')
    dead = int(_send(sqs, url))
    handle = _receive(sqs, url)[0]["ReceiptHandle"]
    sqs(
        "ChangeMessageVisibility",
        {"QueueUrl": url, "ReceiptHandle": handle, "VisibilityTimeout": 0},
    )
    live = int(_send(sqs, url))
    assert sqs("DeleteQueue", {"QueueUrl": url})[0] == 200
    states = dict(Task.objects.values_list("pk", "state"))
    assert (states[dead], states[live]) == (State.DEAD, State.CANCELLED)
    assert _code(sqs, "GetQueueUrl", {"QueueName": "gone"}) == "QueueDoesNotExist"
    assert _code(sqs, "SendMessage", {"QueueUrl": url, "MessageBody": "x"}) == "QueueDoesNotExist"


def test_delete_queue__settings_forgotten__recreated_queue_serves(
    sqs: Sqs, queue_url, api_client
) -> None:
    url = queue_url("settled")
    changed = {"paused": True, "max_in_flight": 3, "key_max_in_flight": 2, "rate_per_s": 5}
    assert api_client.patch("/queues/settled", changed, format="json").status_code == 200
    assert sqs("DeleteQueue", {"QueueUrl": url})[0] == 200
    assert api_client.get("/queues/settled").status_code == 404  # nothing names it now
    url = queue_url("settled")
    shown = api_client.get("/queues/settled").json()
    assert {k: shown[k] for k in changed} == dict.fromkeys(changed) | {"paused": False}
    assert shown["fair"] is True
    _send(sqs, url)
    assert len(_receive(sqs, url)) == 1  # not paused any more


def test_purge__live_messages_cancelled(sqs: Sqs, queue_url) -> None:
    url = queue_url("p")
    for _ in range(3):
        _send(sqs, url)
    _receive(sqs, url)
    assert sqs("PurgeQueue", {"QueueUrl": url})[0] == 200
    assert set(Task.objects.values_list("state", flat=True)) == {State.CANCELLED}
    attrs = sqs("GetQueueAttributes", {"QueueUrl": url, "AttributeNames": ["All"]})[1]
    assert attrs["Attributes"]["ApproximateNumberOfMessages"] == "0"


def test_set_redrive_policy__applies_to_messages_already_sent(sqs: Sqs, queue_url) -> None:
    url = queue_url("later")
    pk = int(_send(sqs, url))
    policy = '{"deadLetterTargetArn": "arn:x", "maxReceiveCount": "2"}'
    body = {"QueueUrl": url, "Attributes": {"RedrivePolicy": policy}}
    assert sqs("SetQueueAttributes", body)[0] == 200
    assert Task.objects.get(pk=pk).max_attempts == 2
    got = sqs("GetQueueAttributes", {"QueueUrl": url, "AttributeNames": ["RedrivePolicy"]})[1]
    assert json.loads(got["Attributes"]["RedrivePolicy"]) == {
        "deadLetterTargetArn": "arn:x",
        "maxReceiveCount": 2,
    }
    body["Attributes"]["RedrivePolicy"] = ""
    sqs("SetQueueAttributes", body)
    assert Task.objects.get(pk=pk).max_attempts is None


@pytest.mark.parametrize("count", ['"' + "9" * 5000 + '"', "9" * 5000], ids=["string", "number"])
def test_redrive_policy__count_of_5000_digits__invalid_attribute_value(
    sqs: Sqs, queue_url, count: str
) -> None:
    policy = '{"deadLetterTargetArn": "arn:x", "maxReceiveCount": ' + count + "}"
    status, body, _ = sqs(
        "SetQueueAttributes",
        {"QueueUrl": queue_url("big"), "Attributes": {"RedrivePolicy": policy}},
    )
    assert (status, body["__type"]) == (400, "com.amazonaws.sqs#InvalidAttributeValue"), body


def test_list_queues__prefix_and_pages(sqs: Sqs, queue_url) -> None:
    for name in ("a1", "a2", "a3", "b1"):
        queue_url(name)
    _, first, _ = sqs("ListQueues", {"QueueNamePrefix": "a", "MaxResults": 2})
    assert [u.rsplit("/", 1)[1] for u in first["QueueUrls"]] == ["a1", "a2"]
    _, rest, _ = sqs("ListQueues", {"QueueNamePrefix": "a", "NextToken": first["NextToken"]})
    assert [u.rsplit("/", 1)[1] for u in rest["QueueUrls"]] == ["a3"]
    assert "NextToken" not in rest
    assert sqs("ListQueues", {"QueueNamePrefix": "zzz"})[1] == {}


def test_create_queue__same_attributes_again__same_url_else_queue_name_exists(
    sqs: Sqs, queue_url
) -> None:
    url = queue_url("twice", VisibilityTimeout="10")
    assert queue_url("twice", VisibilityTimeout="10") == url
    assert queue_url("twice") == url
    body = {"QueueName": "twice", "Attributes": {"VisibilityTimeout": "11"}}
    assert _code(sqs, "CreateQueue", body) == "QueueNameExists"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"QueueName": "x.fifo"}, "InvalidParameterValue"),
        ({"QueueName": "x", "Attributes": {"FifoQueue": "true"}}, "InvalidParameterValue"),
        ({"QueueName": "a.b"}, "InvalidParameterValue"),
        ({"QueueName": "x" * 65}, "InvalidParameterValue"),
        ({}, "MissingParameter"),
        ({"QueueName": "x", "Attributes": {"Policy": "{}"}}, "InvalidAttributeName"),
        ({"QueueName": "x", "Attributes": {"Nope": "1"}}, "InvalidAttributeName"),
        ({"QueueName": "x", "Attributes": {"VisibilityTimeout": "43201"}}, "InvalidAttributeValue"),
        ({"QueueName": "x", "Attributes": {"RedrivePolicy": "{}"}}, "InvalidAttributeValue"),
    ],
)
def test_create_queue__refused(sqs: Sqs, body: dict, code: str) -> None:
    assert _code(sqs, "CreateQueue", body) == code


def test_dead_sqs_message__in_admin_dlq(sqs: Sqs, queue_url, admin_client) -> None:
    url = queue_url("toadmin", RedrivePolicy='{"deadLetterTargetArn": "a", "maxReceiveCount": 1}')
    pk = int(_send(sqs, url, "to the DLQ"))
    _receive(sqs, url, VisibilityTimeout=0)
    assert Task.objects.get(pk=pk).state == State.DEAD
    page = admin_client.get(reverse("admin:broker_deadtask_changelist"))
    assert f"/admin/broker/deadtask/{pk}/change/" in page.content.decode()
    assert admin_client.get(reverse("admin:broker_task_change", args=[pk])).status_code == 200
    dashboard = json.loads(admin_client.get("/dashboard/data.json").content)
    assert dashboard["queues"]["toadmin"]["dead"] == 1
    assert dashboard["invariant"]["healthy"]


def test_unlimited_message__admin_shows_attempts_without_a_max(sqs: Sqs, queue_url, admin_client):
    url = queue_url("unlimited")
    pk = int(_send(sqs, url))
    _receive(sqs, url, VisibilityTimeout=0)
    listing = admin_client.get(reverse("admin:broker_task_changelist")).content.decode()
    assert "1/∞" in listing
    assert admin_client.get(reverse("admin:broker_task_change", args=[pk])).status_code == 200


TRACE = {"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3f"}}


def test_send__system_attributes__kept_beside_the_payload_and_received(
    sqs: Sqs, queue_url, api_client
) -> None:
    url = queue_url("traced")
    body = {"QueueUrl": url, "MessageBody": "m", "MessageSystemAttributes": TRACE}
    status, sent, _ = sqs("SendMessage", body)
    assert status == 200, sent
    # API.md's payload, exactly: what a native worker claiming it sees.
    shown = api_client.get(f"/jobs/{sent['MessageId']}").json()
    assert shown["payload"] == {"body": "m", "attributes": {}}
    (got,) = _receive(sqs, url, VisibilityTimeout=0, MessageSystemAttributeNames=["AWSTraceHeader"])
    assert got["Attributes"] == {"AWSTraceHeader": "Root=1-5759e988-bd862e3f"}
    (got,) = _receive(sqs, url, VisibilityTimeout=0)
    assert "Attributes" not in got
    entries = [{"Id": "a", "MessageBody": "b", "MessageSystemAttributes": TRACE},
               {"Id": "b", "MessageBody": "c"}]  # fmt: skip
    status, batch, _ = sqs("SendMessageBatch", {"QueueUrl": url, "Entries": entries})
    ids = {e["Id"]: int(e["MessageId"]) for e in batch["Successful"]}
    assert set(SqsMessage.objects.values_list("task_id", flat=True)) == {
        int(sent["MessageId"]),
        ids["a"],
    }


def test_receive__task_sent_before_extras_had_a_table__read_from_its_payload(
    sqs: Sqs, queue_url
) -> None:
    url = queue_url("old.fifo", FifoQueue="true")
    stored = {"body": "m", "attributes": {}, "system_attributes": TRACE, "deduplication_id": "d1"}
    queue.enqueue(NewTask(payload=json.dumps(stored), queue="old.fifo", key="g", backoff=False))
    (got,) = _receive(sqs, url, AttributeNames=["All"])
    assert got["Body"] == "m"
    assert (got["Attributes"]["MessageDeduplicationId"], got["Attributes"]["AWSTraceHeader"]) == (
        "d1",
        "Root=1-5759e988-bd862e3f",
    )


def test_extras__pruned_with_their_task__others_kept(sqs: Sqs, queue_url) -> None:
    url = queue_url("gone-extras")
    sent = [sqs("SendMessage", {"QueueUrl": url, "MessageBody": str(n),
                                "MessageSystemAttributes": TRACE})[1]["MessageId"]
            for n in range(3)]  # fmt: skip
    Task.objects.filter(pk=int(sent[0])).delete()  # as retention's prune does
    assert extras.prune() == 1
    assert sorted(SqsMessage.objects.values_list("task_id", flat=True)) == sorted(
        int(pk) for pk in sent[1:]
    )

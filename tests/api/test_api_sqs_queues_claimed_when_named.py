"""A claim that names no queue takes from every queue but those SQS's CreateQueue made: only a
claim naming them, or ReceiveMessage, takes their messages (API.md, claim section)."""

from __future__ import annotations

import pytest

from tests.api.conftest import Sqs

pytestmark = pytest.mark.django_db


def _send(sqs: Sqs, url: str, body: str = "m") -> str:
    status, answer, _ = sqs("SendMessage", {"QueueUrl": url, "MessageBody": body})
    assert status == 200, answer
    return answer["MessageId"]


@pytest.mark.parametrize("fair", [True, False])
@pytest.mark.parametrize("fifo", [False, True])
def test_claim_without_queue__sqs_made_queues_left_to_those_naming_them(
    sqs: Sqs, queue_url, api_client, put, take, set_queue, fair: bool, fifo: bool
) -> None:
    name = "orders.fifo" if fifo else "orders"
    url = queue_url(name, **({"FifoQueue": "true", "ContentBasedDeduplication": "true"}
                             if fifo else {}))  # fmt: skip
    if fifo:
        status, answer, _ = sqs(
            "SendMessage", {"QueueUrl": url, "MessageBody": "m", "MessageGroupId": "g"}
        )
        assert status == 200, answer
        message = answer["MessageId"]
    else:
        message = _send(sqs, url)
    set_queue(name, fair=fair)  # the one-statement claim, or the restricted path
    assert api_client.get("/jobs/next", {"wait_ms": 0}).status_code == 204
    assert take(n=10) == []
    (native,) = put("default")
    assert [d["task"]["id"] for d in take(n=10)] == [native]
    named = api_client.get("/jobs/next", {"wait_ms": 0, "queue": name})
    assert named.status_code == 200 and named.json()["task"]["id"] == message


def test_claim_without_queue__a_native_queue_sqs_only_looked_up__still_taken(
    sqs: Sqs, put, take
) -> None:
    (native,) = put("reports")
    status, answer, _ = sqs("GetQueueUrl", {"QueueName": "reports"})
    assert status == 200, answer
    assert [d["task"]["id"] for d in take(n=10)] == [native]


def test_waiting__a_claim_naming_no_queue__no_worker_of_an_sqs_made_queue(
    sqs: Sqs, queue_url, api_client
) -> None:
    from broker.claimers import claim_log

    message = _send(sqs, queue_url("orders"))
    api_client.get("/jobs/next", {"wait_ms": 0})
    claim_log.flush()
    # The claim that named no queue could not take it: no worker of the queue came.
    assert api_client.get(f"/jobs/{message}").json()["waiting"]["reason"] == "no_workers"


@pytest.mark.parametrize("fair", [True, False])
def test_token_claim_naming_no_queue__granted_sqs_made_queue_left_alone(fair: bool) -> None:
    """An access token's claim naming no queue takes from its granted queues, but those SQS's
    CreateQueue made (marked here as CreateQueue marks them)."""
    from rest_framework.test import APIClient

    from broker import queues
    from broker.models import Queue
    from broker.tokens import making

    worker = making.make("w", ["consume:ord*"]).secret
    producer = making.make("p", ["produce:*"]).secret
    client = APIClient()
    queues.update("orders", {"fair": fair})
    Queue.objects.filter(name="orders").update(made_by_sqs=True)
    ids = {}
    for name in ("orders", "ord-native"):
        r = client.post("/jobs", {"payload": 1, "queue": name}, format="json",
                        headers={"Authorization": f"Bearer {producer}"})  # fmt: skip
        assert r.status_code == 201, r.content
        ids[name] = r.json()["id"]
    auth = {"Authorization": f"Bearer {worker}"}
    got = client.get("/jobs/next", {"wait_ms": 0}, headers=auth)
    assert got.status_code == 200 and got.json()["task"]["id"] == ids["ord-native"]
    assert client.get("/jobs/next", {"wait_ms": 0}, headers=auth).status_code == 204
    named = client.get("/jobs/next", {"wait_ms": 0, "queue": "orders"}, headers=auth)
    assert named.status_code == 200 and named.json()["task"]["id"] == ids["orders"]

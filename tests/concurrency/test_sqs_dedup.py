"""SQS under real concurrency on PostgreSQL: senders racing with one FIFO deduplication id (new,
or expired and taken over) store one message, and every one of them answers its id; queues made
and deleted at once answer as SQS does."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from broker.models import Queue, SqsDedup, SqsQueue, Task
from broker.sqs import dedup, queues
from tests.concurrency.conftest import in_thread
from tests.concurrency.test_contention import ServedClient

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SENDERS = 8
JSON_1_0 = "application/x-amz-json-1.0"


def _call(client: Client, action: str, body: dict) -> dict:
    response = client.post(
        "/sqs", data=json.dumps(body), content_type=JSON_1_0,
        HTTP_X_AMZ_TARGET=f"AmazonSQS.{action}",
    )  # fmt: skip
    answer: dict = json.loads(response.content)
    assert response.status_code == 200, answer
    return answer


def _race(action: str, bodies: list[dict]) -> list[dict]:
    """Each body sent by a thread of its own, all released at once; their answers."""
    start = threading.Barrier(len(bodies))
    answers: list[dict] = [{}] * len(bodies)
    errors: list[BaseException] = []

    def send(n: int) -> None:
        client = Client()
        start.wait(timeout=10)
        answers[n] = _call(client, action, bodies[n])

    threads = [in_thread(lambda n=n: send(n), errors) for n in range(len(bodies))]
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    return answers


@pytest.fixture
def url() -> str:
    body = {"QueueName": "race.fifo", "Attributes": {"FifoQueue": "true"}}
    return str(_call(Client(), "CreateQueue", body)["QueueUrl"])


def _message(url: str, n: int, dedup_id: str = "same") -> dict:
    return {"QueueUrl": url, "MessageBody": f"copy {n}", "MessageGroupId": f"g{n % 3}",
            "MessageDeduplicationId": dedup_id}  # fmt: skip


def test_racing_senders__one_message_every_answer_its_id(url: str) -> None:
    for round_ in range(3):
        answers = _race("SendMessage", [_message(url, n, f"id{round_}") for n in range(SENDERS)])
        assert len({a["MessageId"] for a in answers}) == 1, answers
        assert len({a["SequenceNumber"] for a in answers}) == 1
    assert Task.objects.filter(queue="race.fifo").count() == 3
    assert SqsDedup.objects.filter(queue="race.fifo", task_id__isnull=True).count() == 0


def test_racing_batches__overlapping_ids_in_any_order__each_once(url: str) -> None:
    ids = [f"d{i}" for i in range(6)]
    bodies = []
    for n in range(SENDERS):
        mine = ids[n % 3 :] + ids[: n % 3]  # the same ids, each batch in another order
        bodies.append({"QueueUrl": url, "Entries": [
            {"Id": f"e{i}", "MessageBody": d, "MessageGroupId": "g", "MessageDeduplicationId": d}
            for i, d in enumerate(mine if n % 2 else mine[::-1])
        ]})  # fmt: skip
    answers = _race("SendMessageBatch", bodies)
    by_id: dict[str, set[str]] = {}
    for body, answer in zip(bodies, answers, strict=True):
        assert answer["Failed"] == []
        sent = {e["Id"]: e["MessageDeduplicationId"] for e in body["Entries"]}
        for ok in answer["Successful"]:
            by_id.setdefault(sent[ok["Id"]], set()).add(ok["MessageId"])
    assert all(len(pks) == 1 for pks in by_id.values()), by_id
    stored = Task.objects.filter(queue="race.fifo").values_list("pk", flat=True)
    assert sorted(stored) == sorted(int(pk) for (pk,) in by_id.values())
    assert len(stored) == len(ids)


def test_racing_senders__expired_id_taken_over_once(url: str) -> None:
    first = _call(Client(), "SendMessage", _message(url, 0, "old"))
    SqsDedup.objects.filter(dedup_id="old").update(expires_at=timezone.now() - timedelta(seconds=1))
    answers = _race("SendMessage", [_message(url, n, "old") for n in range(SENDERS)])
    assert len({a["MessageId"] for a in answers}) == 1
    assert answers[0]["MessageId"] != first["MessageId"]
    assert Task.objects.filter(queue="race.fifo").count() == 2


def test_senders_racing_the_sweepers_prune__one_message(url: str) -> None:
    """The prune deletes an expired row between a sender's insert and its read: it tries again."""
    _call(Client(), "SendMessage", _message(url, 0, "old"))
    past = timezone.now() - timedelta(seconds=1)
    for _ in range(5):
        SqsDedup.objects.filter(dedup_id="old").update(expires_at=past)
        before = Task.objects.count()
        stop = threading.Event()
        errors: list[BaseException] = []

        def prune(stop: threading.Event = stop) -> None:
            while not stop.is_set():
                dedup.prune()

        pruner = in_thread(prune, errors)
        answers = _race("SendMessage", [_message(url, n, "old") for n in range(SENDERS)])
        stop.set()
        pruner.join(timeout=10)
        assert not errors, errors
        assert len({a["MessageId"] for a in answers}) == 1
        assert Task.objects.count() == before + 1


def test_create_and_delete_queue_at_once__every_answer_sqs_s_own() -> None:
    """CreateQueue, DeleteQueue and sends naming one queue from six threads at once: each
    answer is a success or QueueDoesNotExist (a row inserted or deleted under a call once made
    a 500 or a 503 out of a unique key's violation)."""
    answers: list[tuple[str, int, str]] = []
    errors: list[BaseException] = []
    until = time.monotonic() + 2.0
    url = "http://testserver/sqs/churn"

    def loop(action: str, body: dict) -> None:
        client = ServedClient()
        while time.monotonic() < until:
            response = client.post(
                "/sqs", data=json.dumps(body), content_type=JSON_1_0,
                HTTP_X_AMZ_TARGET=f"AmazonSQS.{action}",
            )  # fmt: skip
            kind = json.loads(response.content).get("__type", "").rpartition("#")[2]
            answers.append((action, response.status_code, kind))

    jobs = [("CreateQueue", {"QueueName": "churn"})] * 3 + [
        ("DeleteQueue", {"QueueUrl": url}),
        ("DeleteQueue", {"QueueUrl": url}),
        ("SendMessage", {"QueueUrl": url, "MessageBody": "m"}),
    ]
    threads = [in_thread(lambda a=a, b=b: loop(a, b), errors) for a, b in jobs]
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    assert {a for a, status, _ in answers if status == 200} == {a for a, _ in jobs}
    wrong = {(a, s, k) for a, s, k in answers if s != 200 and k != "QueueDoesNotExist"}
    assert not wrong, wrong


def test_queue_row_deleted_again_and_again__every_look_finds_or_makes_it() -> None:
    """The row of a queue with settings is made by whoever names it first (a SendMessage's,
    GetQueueUrl's or CreateQueue's look) while DeleteQueue's delete of it runs again and again:
    each look answers the row, none fails on the unique key (once a 503). Called below the
    endpoint, so that many more looks meet the deletes than over HTTP."""
    Queue.objects.create(name="churn")
    found: list[bool] = []
    errors: list[BaseException] = []
    until = time.monotonic() + 2.0

    def look() -> None:
        while time.monotonic() < until:
            found.append(queues.find("churn") is not None)
            connection.close()

    def delete() -> None:
        while time.monotonic() < until:
            SqsQueue.objects.filter(name="churn").delete()
            connection.close()

    threads = [in_thread(look, errors) for _ in range(6)]
    threads += [in_thread(delete, errors) for _ in range(2)]
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    assert found and all(found)

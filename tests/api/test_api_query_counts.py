"""The hot paths cost the fewest queries: a regression here fails, whatever the machine's speed."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

# transaction=True: counted as in production, with no test transaction turning BEGIN into SAVEPOINT.
pytestmark = pytest.mark.django_db(transaction=True)


# PostgreSQL: enqueue, claim, ack and nack are one statement each (broker/queue/sql.py), in
# autocommit; SQLite runs the same moves as ORM statements between BEGIN IMMEDIATE and COMMIT
# (both counted).
EXPECTED = {
    "postgresql": {"enqueue": 1, "claim": 1, "ack": 1, "nack": 1, "claim_empty": 1},
    "sqlite": {"enqueue": 4, "claim": 5, "ack": 5, "nack": 6, "claim_empty": 3},
}


@pytest.fixture(autouse=True)
def _scope_written_this_second(api_client, monkeypatch) -> None:
    """The first claim of a scope in a second writes its note (one statement more: see
    test_claim__first_of_its_scope_this_second__one_statement_more); the counts below are of the
    claims after it."""
    from broker.claimers import claim_log

    api_client.get("/jobs/next?wait_ms=0")
    monkeypatch.setattr(claim_log, "write_every_s", 3600.0)


def _count(call) -> tuple[int, object]:
    with CaptureQueriesContext(connection) as ctx:
        result = call()
    return len(ctx.captured_queries), result


def test_hot_paths__query_count_per_call(api_client) -> None:
    expected = EXPECTED[connection.vendor]
    n, r = _count(lambda: api_client.post("/jobs", {"payload": {"a": 1}}, format="json"))
    assert r.status_code == 201
    assert n == expected["enqueue"]
    api_client.post("/jobs", {"payload": {"a": 2}}, format="json")

    n, r = _count(lambda: api_client.get("/jobs/next?wait_ms=0"))
    assert r.status_code == 200
    assert n == expected["claim"]
    first = r.json()
    n, r = _count(
        lambda: api_client.post(f"/jobs/{first['task']['id']}/ack?lease_id={first['lease_id']}")
    )
    assert r.status_code == 204
    assert n == expected["ack"]

    second = api_client.get("/jobs/next?wait_ms=0").json()
    n, r = _count(
        lambda: api_client.post(
            f"/jobs/{second['task']['id']}/nack?lease_id={second['lease_id']}",
            {"error": "boom"},
            format="json",
        )
    )
    assert r.status_code == 204
    assert n == expected["nack"]

    n, r = _count(lambda: api_client.get("/jobs/next?wait_ms=0"))
    assert r.status_code == 204
    assert n == expected["claim_empty"]


def test_batch_claim__one_query_for_many(api_client) -> None:
    api_client.post("/jobs/batch", {"jobs": [{"payload": i} for i in range(20)]}, format="json")
    n, r = _count(lambda: api_client.post("/jobs/claim", {"max": 10, "wait_ms": 0}, format="json"))
    assert r.status_code == 200 and len(r.json()["deliveries"]) == 10
    assert n == EXPECTED[connection.vendor]["claim"]


def test_claim__first_of_its_scope_this_second__one_statement_more(api_client) -> None:
    expected = EXPECTED[connection.vendor]["claim_empty"]
    n, r = _count(lambda: api_client.get("/jobs/next?wait_ms=0&queue=fresh"))
    assert r.status_code == 204
    assert n == expected + 1
    n, r = _count(lambda: api_client.get("/jobs/next?wait_ms=0&queue=fresh"))
    assert n == expected


def test_sqs_standard_queue__send_as_before_receive_costs_the_same_for_2_or_10(
    sqs, queue_url
) -> None:
    """A queue made by CreateQueue is fair; its keyless messages cost no statement per message:
    a send is the queue's read and the enqueue, a receive of 10 costs what a receive of 2 does
    (one probe more than a receive of 1: the keyless key's next tasks)."""
    url = queue_url("std")
    n, (status, _, _) = _count(lambda: sqs("SendMessage", {"QueueUrl": url, "MessageBody": "m"}))
    assert (status, n) == (200, 1 + EXPECTED[connection.vendor]["enqueue"])
    entries = [{"Id": str(i), "MessageBody": "m"} for i in range(10)]
    for _ in range(2):
        sqs("SendMessageBatch", {"QueueUrl": url, "Entries": entries})
    sqs("ReceiveMessage", {"QueueUrl": url})  # the first claim of a scope writes its note
    costs = []
    for most in (1, 2, 10):
        n, (status, answer, _) = _count(
            lambda most=most: sqs("ReceiveMessage", {"QueueUrl": url, "MaxNumberOfMessages": most})
        )
        assert (status, len(answer["Messages"])) == (200, most)
        costs.append(n)
    assert costs[0] + 1 == costs[1] == costs[2], costs


@pytest.mark.postgres
@pytest.mark.parametrize(
    "unique",
    [
        {"key": "k"},
        {"key": "k", "on_conflict": "replace", "debounce_ms": 1000, "debounce_max_ms": 5000},
        {"key": "k", "until": "period", "period_s": 60},
    ],
)
@pytest.mark.parametrize("idempotency_key", [None, "i"])
def test_unique_enqueue__one_statement_new_or_held(api_client, unique, idempotency_key) -> None:
    """A unique enqueue is one round trip on PostgreSQL: new, answered by its holder (absorbing
    it), or by the task keeping its idempotency key."""
    for status in (201, 200):
        body = {"payload": 1, "unique": unique, "idempotency_key": idempotency_key}
        n, r = _count(lambda body=body: api_client.post("/jobs", body, format="json"))
        assert (r.status_code, n) == (status, 1)
        if idempotency_key:  # a retried post keeps its key: answered by that task
            n, r = _count(lambda body=body: api_client.post("/jobs", body, format="json"))
            assert (r.status_code, n) == (200, 1)
            idempotency_key = "j"

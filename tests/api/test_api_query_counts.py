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

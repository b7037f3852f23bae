"""POST /jobs/batch, /jobs/claim, /jobs/ack, /jobs/nack as API.md's "Batch endpoints" says."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from broker import queue
from tests.conftest import assert_invariant

pytestmark = pytest.mark.django_db


def _batch(api_client, jobs):
    return api_client.post("/jobs/batch", {"jobs": jobs}, format="json")


def test_enqueue_batch__ids_in_order__201(api_client) -> None:
    r = _batch(api_client, [{"payload": i} for i in range(5)])
    assert r.status_code == 201
    ids = r.json()["ids"]
    assert len(ids) == 5
    got = [api_client.get(f"/jobs/{i}").json()["payload"] for i in ids]
    assert got == [0, 1, 2, 3, 4]
    assert queue.totals()["enqueued"] == 5


def test_enqueue_batch__one_bad_item__400_names_it_and_nothing_stored(api_client) -> None:
    r = _batch(
        api_client,
        [{"payload": 1}, {"payload": 2}, {"payload": 3}, {"payload": 4, "max_attempts": 0}],
    )
    assert r.status_code == 400
    assert "jobs.3.max_attempts" in r.json()["fields"]
    assert queue.totals()["enqueued"] == 0
    assert queue.gauges()[0]["ready"] == 0


@pytest.mark.parametrize("jobs", [[], [{"payload": 1}] * 1001, "x", None])
def test_enqueue_batch__not_1_to_1000_items__400(api_client, jobs) -> None:
    r = _batch(api_client, jobs)
    assert r.status_code == 400
    assert "jobs" in r.json()["fields"]


def test_enqueue_batch__unknown_field_in_item__400(api_client) -> None:
    r = _batch(api_client, [{"payload": 1, "max_attempt": 2}])
    assert r.status_code == 400
    assert r.json()["fields"] == {"jobs.0.max_attempt": ["Unknown field."]}


@pytest.mark.parametrize("item", [5, None, [1], "job"])
def test_enqueue_batch__item_not_an_object__400_naming_the_item(api_client, item) -> None:
    r = _batch(api_client, [{"payload": 1}, item])
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["jobs.1"], r.json()


def test_enqueue_batch__idempotency_keys__repeat_gets_first_id(api_client) -> None:
    first = api_client.post("/jobs", {"payload": 1, "idempotency_key": "k1"}, format="json")
    r = _batch(
        api_client,
        [
            {"payload": 2, "idempotency_key": "k1"},
            {"payload": 3, "idempotency_key": "k2"},
            {"payload": 4, "idempotency_key": "k2"},
        ],
    )
    assert r.status_code == 201
    ids = r.json()["ids"]
    assert ids[0] == first.json()["id"]
    assert ids[1] == ids[2]
    assert queue.totals()["enqueued"] == 2


def test_claim_batch__up_to_max__deliveries_shape(api_client) -> None:
    _batch(api_client, [{"payload": i} for i in range(15)])
    r = api_client.post("/jobs/claim", {"max": 10, "wait_ms": 0}, format="json")
    assert r.status_code == 200
    deliveries = r.json()["deliveries"]
    assert len(deliveries) == 10
    assert set(deliveries[0]) == {"task", "lease_id", "deadline"}
    assert [d["task"]["payload"] for d in deliveries] == list(range(10))
    assert queue.totals()["delivered"] == 10


def test_claim_batch__nothing_ready__204(api_client) -> None:
    r = api_client.post("/jobs/claim", {"max": 5, "wait_ms": 50}, format="json")
    assert r.status_code == 204
    assert r.content == b""


@pytest.mark.parametrize(
    "body",
    [
        {"max": 0},
        {"max": 101},
        {"max": "3"},
        {"maxx": 3},
        {"queues": ["bad name"]},
        {"queues": []},
        {"queues": None},
        {"queues": "a"},
        {"wait_ms": -1},
    ],
)
def test_claim_batch__bad_body__400_and_nothing_handed_out(api_client, body) -> None:
    _batch(api_client, [{"payload": 1}])
    r = api_client.post("/jobs/claim", {"wait_ms": 0, **body}, format="json")
    assert r.status_code == 400
    assert "error" in r.json()
    assert api_client.get("/stats").json()["ready"] == 1


def test_ack_batch__per_item_answers(api_client) -> None:
    _batch(api_client, [{"payload": i} for i in range(3)])
    d = api_client.post("/jobs/claim", {"max": 3, "wait_ms": 0}, format="json").json()
    a, b, c = d["deliveries"]
    r = api_client.post(
        "/jobs/ack",
        {
            "acks": [
                {"id": a["task"]["id"], "lease_id": a["lease_id"], "result": {"ok": 1}},
                {"id": b["task"]["id"], "lease_id": "wrong"},
                {"id": "999999", "lease_id": c["lease_id"]},
                {"id": a["task"]["id"], "lease_id": a["lease_id"]},
            ]
        },
        format="json",
    )
    assert r.status_code == 200
    assert [x["status"] for x in r.json()["results"]] == [204, 409, 404, 404]
    assert api_client.get(f"/jobs/{a['task']['id']}").json()["result"] == {"ok": 1}
    assert queue.totals()["acked"] == 1
    assert_invariant()


def test_nack_batch__retry_and_bury__counters_and_errors(api_client) -> None:
    _batch(api_client, [{"payload": 1, "max_attempts": 1}, {"payload": 2, "max_attempts": 3}])
    d = api_client.post("/jobs/claim", {"max": 2, "wait_ms": 0}, format="json").json()
    items = [
        {"id": x["task"]["id"], "lease_id": x["lease_id"], "error": f"boom {i}"}
        for i, x in enumerate(d["deliveries"])
    ]
    r = api_client.post("/jobs/nack", {"nacks": items}, format="json")
    assert [x["status"] for x in r.json()["results"]] == [204, 204]
    dead = api_client.get(f"/jobs/{items[0]['id']}").json()
    retried = api_client.get(f"/jobs/{items[1]['id']}").json()
    assert dead["state"] == "dead" and dead["last_error"] == "boom 0"
    assert retried["state"] == "delayed" and retried["errors"][0]["error"] == "boom 1"
    totals = queue.totals()
    assert (totals["nacked"], totals["retried"], totals["buried"]) == (2, 1, 1)
    assert_invariant()


def test_ack_batch__bad_items__answered_400_each(api_client) -> None:
    r = api_client.post(
        "/jobs/ack",
        {"acks": ["x", {"id": "1"}, {"id": "1", "lease_id": "l", "bogus": 1}]},
        format="json",
    )
    assert r.status_code == 200
    assert [x["status"] for x in r.json()["results"]] == [400, 400, 400]


def test_ack_batch__query_count_does_not_grow_with_batch(api_client) -> None:
    def run(n: int) -> int:
        _batch(api_client, [{"payload": i} for i in range(n)])
        d = api_client.post("/jobs/claim", {"max": n, "wait_ms": 0}, format="json").json()
        acks = [{"id": x["task"]["id"], "lease_id": x["lease_id"]} for x in d["deliveries"]]
        with CaptureQueriesContext(connection) as ctx:
            api_client.post("/jobs/ack", {"acks": acks}, format="json")
        return len(ctx.captured_queries)

    assert run(2) == run(50)

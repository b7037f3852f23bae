"""POST /jobs/claim with acks and nacks: settle and claim in one round trip (API.md)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connections
from rest_framework.test import APIClient

from broker import queue
from broker.models import Task
from broker.wakeup import hub
from tests.conftest import post

pytestmark = pytest.mark.django_db


def _fill(client: APIClient, n: int, **fields: Any) -> list[str]:
    r = post(client, "/jobs/batch", {"jobs": [{"payload": i, **fields} for i in range(n)]})
    assert r.status_code == 201
    ids: list[str] = r.json()["ids"]
    return ids


def _claim(client: APIClient, body: dict[str, Any]) -> Any:
    return post(client, "/jobs/claim", {"wait_ms": 0, **body})


def _held(client: APIClient, n: int) -> list[dict[str, Any]]:
    r = _claim(client, {"max": n})
    assert r.status_code == 200
    deliveries: list[dict[str, Any]] = r.json()["deliveries"]
    return deliveries


def _item(d: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": d["task"]["id"], "lease_id": d["lease_id"], **extra}


def test_settle_and_claim__acks_nacks_then_new_deliveries(api_client: APIClient) -> None:
    _fill(api_client, 5)
    a, b = _held(api_client, 2)
    r = _claim(
        api_client,
        {"max": 2, "acks": [_item(a, result={"ok": True})], "nacks": [_item(b, error="boom")]},
    )
    assert r.status_code == 200
    body = r.json()
    assert body["results"] == [
        {"id": a["task"]["id"], "status": 204},
        {"id": b["task"]["id"], "status": 204},
    ]
    assert [d["task"]["payload"] for d in body["deliveries"]] == [2, 3]
    done = api_client.get(f"/jobs/{a['task']['id']}").json()
    failed = api_client.get(f"/jobs/{b['task']['id']}").json()
    assert (done["state"], done["result"]) == ("done", {"ok": True})
    assert (failed["state"], failed["last_error"]) == ("delayed", "boom")
    totals = queue.totals()
    assert (totals["acked"], totals["nacked"], totals["delivered"]) == (1, 1, 4)


def test_settle_and_claim__nothing_to_claim__200_with_results_and_no_deliveries(
    api_client: APIClient,
) -> None:
    _fill(api_client, 1)
    (a,) = _held(api_client, 1)
    r = _claim(api_client, {"acks": [_item(a)], "wait_ms": 50})
    assert r.status_code == 200
    assert r.json() == {"results": [{"id": a["task"]["id"], "status": 204}], "deliveries": []}


def test_settle_and_claim__empty_lists__still_the_settling_answer(api_client: APIClient) -> None:
    r = _claim(api_client, {"acks": [], "nacks": []})
    assert r.status_code == 200
    assert r.json() == {"results": [], "deliveries": []}


def test_settle_and_claim__unknown_and_other_lease__answered_in_results(
    api_client: APIClient,
) -> None:
    _fill(api_client, 1)
    (a,) = _held(api_client, 1)
    r = _claim(
        api_client,
        {
            "acks": [
                {"id": "999999", "lease_id": "x"},
                {"id": a["task"]["id"], "lease_id": "not-it"},
                _item(a),
                _item(a),
            ]
        },
    )
    results = r.json()["results"]
    assert [x["status"] for x in results] == [404, 409, 204, 404]
    assert results[1]["error"] == "The task is handed out under another lease."
    assert results[0]["error"].startswith("The task is not handed out")


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"acks": [{"id": "1"}]}, "acks.1.lease_id"),
        ({"acks": ["x"]}, "acks.1"),
        ({"nacks": [{"id": "1", "lease_id": "l", "error": 5}]}, "nacks.0.error"),
        ({"acks": [{"id": "1", "lease_id": "l", "bogus": 1}]}, "acks.1.bogus"),
        ({"nacks": {"id": "1"}}, "nacks"),
        ({"max": 0}, "max"),
        ({"queues": ["bad name"]}, "queues.0"),
    ],
)
def test_settle_and_claim__malformed__400_names_the_field_and_settles_nothing(
    api_client: APIClient, bad: dict[str, Any], field: str
) -> None:
    _fill(api_client, 1)
    (a,) = _held(api_client, 1)
    body = {**bad, "acks": [_item(a), *bad.get("acks", [])]}  # a good ack comes first
    r = _claim(api_client, body)
    assert r.status_code == 400
    assert field in r.json()["fields"], r.json()
    assert Task.objects.get(pk=a["task"]["id"]).state == "handed_out"
    assert queue.totals()["acked"] == 0


def test_settle_and_claim__over_1000_items__400_and_nothing_settled(api_client: APIClient) -> None:
    _fill(api_client, 1)
    (a,) = _held(api_client, 1)
    filler = [{"id": "999999", "lease_id": "x"}] * 1000
    r = _claim(api_client, {"acks": [_item(a)], "nacks": filler})
    assert r.status_code == 400
    assert Task.objects.get(pk=a["task"]["id"]).state == "handed_out"


@pytest.mark.django_db(transaction=True)
def test_settle_and_claim__acks_committed_before_the_claim_parks(api_client: APIClient) -> None:
    _fill(api_client, 1)
    (a,) = _held(api_client, 1)
    answer: dict[str, Any] = {}

    def park() -> None:
        try:
            answer["r"] = _claim(APIClient(), {"acks": [_item(a)], "wait_ms": 6000})
        finally:
            connections.close_all()

    thread = threading.Thread(target=park)
    parked_before = hub.parked()
    start = time.monotonic()
    thread.start()
    # Read once the claim waits in the hub: a read beside its writes could meet SQLite's table
    # lock (the test database is shared-cache memory), which answers a write at once, 503.
    while hub.parked() == parked_before and time.monotonic() - start < 4:
        time.sleep(0.005)
    assert hub.parked() > parked_before and thread.is_alive(), "the claim did not wait"
    seen = Task.objects.filter(pk=a["task"]["id"]).values_list("state", flat=True).first()
    assert seen == "done", "the ack waited for the claim's wait to end"
    assert thread.is_alive(), "the claim answered instead of waiting"
    thread.join(15)
    assert answer["r"].status_code == 200 and answer["r"].json()["deliveries"] == []

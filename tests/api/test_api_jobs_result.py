"""The result sent with an ack is kept and shown by GET /jobs/{id} and GET /jobs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import post

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "result",
    [
        {"rows": 3, "nested": {"list": [1, 2.5, None, True, "x"]}},
        ["a", {"b": []}],
        "plain text with ünïcödé and \u0000 and \U0001f600",
        0,
        -1.25,
        False,
    ],
)
def test_ack__result__kept_and_shown_exactly(api_client, enqueue, claim, task, result) -> None:
    pk = enqueue()
    lease = claim()["lease_id"]
    r = post(api_client, f"/jobs/{pk}/ack?lease_id={lease}", {"result": result})
    assert r.status_code == 204
    assert task(pk)["result"] == result
    listed = api_client.get("/jobs?state=done").json()["results"]
    assert [(t["id"], t["result"]) for t in listed] == [(pk, result)]


@pytest.mark.parametrize("body", [None, {}, {"result": None}])
def test_ack__no_result__null(api_client, enqueue, claim, task, body: Any) -> None:
    pk = enqueue()
    lease = claim()["lease_id"]
    assert post(api_client, f"/jobs/{pk}/ack?lease_id={lease}", body).status_code == 204
    shown = task(pk)
    assert (shown["state"], shown["result"]) == ("done", None)


def test_ack__result_with_lease_in_body(api_client, enqueue, claim, task) -> None:
    pk = enqueue()
    lease = claim()["lease_id"]
    r = post(api_client, f"/jobs/{pk}/ack", {"lease_id": lease, "result": {"ok": True}})
    assert r.status_code == 204
    assert task(pk)["result"] == {"ok": True}


def test_ack__refused_ack__result_not_kept(api_client, enqueue, claim, task) -> None:
    pk = enqueue()
    claim()
    r = post(api_client, f"/jobs/{pk}/ack?lease_id=not-the-lease", {"result": "stolen"})
    assert r.status_code == 409
    assert task(pk)["result"] is None


def test_ack__batch_results_kept_per_task(api_client, enqueue, task) -> None:
    ids = [enqueue(), enqueue()]
    deliveries = post(api_client, "/jobs/claim", {"max": 2, "wait_ms": 0}).json()["deliveries"]
    acks = [
        {"id": d["task"]["id"], "lease_id": d["lease_id"], "result": {"n": d["task"]["id"]}}
        for d in deliveries
    ]
    assert post(api_client, "/jobs/ack", {"acks": acks}).status_code == 200
    assert [task(pk)["result"] for pk in ids] == [{"n": ids[0]}, {"n": ids[1]}]


def test_nack__leaves_result_null_and_keeps_the_error(api_client, enqueue, claim, task) -> None:
    pk = enqueue(max_attempts=1)
    lease = claim()["lease_id"]
    post(api_client, f"/jobs/{pk}/nack?lease_id={lease}", {"error": "boom"})
    shown = task(pk)
    assert (shown["state"], shown["result"], shown["last_error"]) == ("dead", None, "boom")

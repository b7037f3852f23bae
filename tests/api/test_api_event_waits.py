"""POST /jobs/{id}/wait (suspend mid-run) and wait timeouts (API.md "Waiting for events, and
approvals"): the lease and the attempt given back, the checkpoint kept, resumed with the event;
the sweeper cancels (with the cascade) or runs a waiter at its deadline."""

from __future__ import annotations

from typing import Any

import pytest

from broker.sweeper import sweep_once
from tests.conftest import post

pytestmark = pytest.mark.django_db


def _claim(api_client, queue: str = "default") -> dict[str, Any]:
    r = api_client.get("/jobs/next", {"wait_ms": 0, "queue": queue})
    assert r.status_code == 200, r.content
    return r.json()


def _enqueue(api_client, **body: Any) -> str:
    body.setdefault("payload", {"n": 1})
    r = post(api_client, "/jobs", body)
    assert r.status_code == 201, r.content
    return r.json()["id"]


def _task(api_client, pk: str) -> dict[str, Any]:
    return api_client.get(f"/jobs/{pk}").json()


def _wait(api_client, pk: str, lease: str, **body: Any) -> Any:
    return post(api_client, f"/jobs/{pk}/wait?lease_id={lease}", body)


def test_wait__suspends__attempt_back__resumed_with_checkpoint_and_event(api_client) -> None:
    pk = _enqueue(api_client, max_attempts=1)
    held = _claim(api_client)
    assert held["task"]["attempts"] == 1
    r = _wait(api_client, pk, held["lease_id"], event="paid", key="o-1", checkpoint={"step": 2})
    assert (r.status_code, r.json()) == (200, {"state": "blocked"})
    body = _task(api_client, pk)
    assert (body["state"], body["attempts"], body["checkpoint"]) == ("blocked", 0, {"step": 2})
    assert (body["lease_deadline"], body["event"]) == (None, None)
    assert body["waiting"]["reason"] == "event"
    # The old lease is gone: its ack is a 404.
    assert post(api_client, f"/jobs/{pk}/ack?lease_id={held['lease_id']}").status_code == 404
    assert (
        post(api_client, "/events", {"name": "paid", "key": "o-1", "data": 5}).json()["released"]
        == 1
    )
    again = _claim(api_client)
    assert again["task"]["id"] == pk
    assert again["task"]["attempts"] == 1  # max_attempts 1 still has its attempt
    assert again["task"]["checkpoint"] == {"step": 2}
    assert (again["task"]["event"]["name"], again["task"]["event"]["data"]) == ("paid", 5)
    assert post(api_client, f"/jobs/{pk}/ack?lease_id={again['lease_id']}").status_code == 204
    totals = api_client.get("/stats").json()["totals"]
    assert (totals["suspended"], totals["released"], totals["delivered"]) == (1, 1, 2)
    assert (totals["acked"], totals["enqueued"]) == (1, 1)


def test_wait__event_kept_already__ready_at_once(api_client) -> None:
    post(api_client, "/events", {"name": "paid", "key": "o-2"})
    pk = _enqueue(api_client)
    held = _claim(api_client)
    r = _wait(api_client, pk, held["lease_id"], event="paid", key="o-2")
    assert r.json() == {"state": "ready"}
    again = _claim(api_client)
    assert again["task"]["event"]["key"] == "o-2"
    totals = api_client.get("/stats").json()["totals"]
    assert (totals["suspended"], totals["released"]) == (1, 1)


def test_wait__without_checkpoint__the_last_one_kept(api_client) -> None:
    pk = _enqueue(api_client)
    held = _claim(api_client)
    url = f"/jobs/{pk}/progress?lease_id={held['lease_id']}"
    assert post(api_client, url, {"checkpoint": [1]}).status_code == 200
    assert _wait(api_client, pk, held["lease_id"], event="e", key="k").status_code == 200
    assert _task(api_client, pk)["checkpoint"] == [1]


def test_wait__not_held_404__other_lease_409__bad_body_400(api_client) -> None:
    pk = _enqueue(api_client)
    assert _wait(api_client, pk, "nope", event="e", key="k").status_code == 404
    held = _claim(api_client)
    assert _wait(api_client, pk, "other", event="e", key="k").status_code == 409
    assert _wait(api_client, "999", "x", event="e", key="k").status_code == 404
    r = _wait(api_client, pk, held["lease_id"], key="k", timeout_ms=0, extra=1)
    assert r.status_code == 400
    assert {"event", "timeout_ms", "extra"} <= set(r.json()["fields"])
    r = post(api_client, f"/jobs/{pk}/wait", {"event": "e", "key": "k"})
    assert r.status_code == 400  # no lease_id
    assert _task(api_client, pk)["state"] == "handed_out"


def test_timeout_cancel__cancelled_with_its_dependants(api_client, clock) -> None:
    pk = _enqueue(api_client, wait_for={"event": "e", "key": "k", "timeout_ms": 60_000})
    child = _enqueue(api_client, after=[pk])
    until = _task(api_client, pk)["waiting"]["until"]
    assert until is not None
    sweep_once()
    assert _task(api_client, pk)["state"] == "blocked"
    clock.advance(61_000)
    sweep_once()
    assert (_task(api_client, pk)["state"], _task(api_client, child)["state"]) == (
        "cancelled", "cancelled"
    )  # fmt: skip
    sweep_once()
    totals = api_client.get("/stats").json()["totals"]
    assert (totals["cancelled"], totals["released"]) == (2, 0)
    assert post(api_client, "/events", {"name": "e", "key": "k"}).json()["released"] == 0


def test_timeout_run__released_with_event_null(api_client, clock) -> None:
    wait = {"event": "e", "key": "k", "timeout_ms": 1000, "on_timeout": "run"}
    pk = _enqueue(api_client, delay_ms=5000, wait_for=wait)
    clock.advance(2000)
    sweep_once()
    body = _task(api_client, pk)
    assert (body["state"], body["event"]) == ("delayed", None)
    assert api_client.get("/stats").json()["totals"]["released"] == 1


def test_timeout_of_a_suspended_task(api_client, clock) -> None:
    pk = _enqueue(api_client)
    held = _claim(api_client)
    wait = {"event": "e", "key": "k", "timeout_ms": 1000, "on_timeout": "run"}
    assert _wait(api_client, pk, held["lease_id"], **wait).status_code == 200
    clock.advance(1500)
    sweep_once()
    again = _claim(api_client)
    assert (again["task"]["id"], again["task"]["event"]) == (pk, None)

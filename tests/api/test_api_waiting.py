"""GET /jobs/{id}'s `waiting`: why a ready or delayed task is not running, first reason first."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from broker.claimers import EVERY_QUEUE, claim_log
from broker.models import ClaimScope
from broker.queue.base import current_time
from tests.api.conftest import TIMESTAMP, ack_all

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_claims_seen() -> None:
    ClaimScope.objects.all().delete()  # rows an earlier test's process may have written


def waiting(client, task_id: str) -> dict | None:
    r = client.get(f"/jobs/{task_id}")
    assert r.status_code == 200
    return r.json()["waiting"]


def seen(*scopes: str, ago_s: float = 0) -> None:
    at = current_time() - timedelta(seconds=ago_s)
    for scope in scopes:
        ClaimScope.objects.update_or_create(scope=scope, defaults={"seen_at": at})


def test_waiting__no_claim_ever__no_workers(api_client, put) -> None:
    (pk,) = put("mail")
    w = waiting(api_client, pk)
    assert w == {
        "reason": "no_workers",
        "detail": "No claim request that could take from 'mail' came in the last 60 s.",
    }


def test_waiting__a_claim_of_the_queue_or_of_every_queue_within_60_s__queued(
    api_client, put, take
) -> None:
    (pk,) = put("mail")
    seen("mail", ago_s=59)
    assert waiting(api_client, pk)["reason"] == "queued"
    ClaimScope.objects.all().delete()
    seen(EVERY_QUEUE, ago_s=30)
    assert waiting(api_client, pk)["reason"] == "queued"
    ClaimScope.objects.all().delete()
    seen("mail", EVERY_QUEUE, ago_s=61)
    seen("other")
    assert waiting(api_client, pk)["reason"] == "no_workers"


def test_waiting__a_claim_just_answered__counted_at_once(api_client, put) -> None:
    # Another broker process reads ClaimScope: the first claim of a scope in a second writes
    # its note before it answers, so nothing waits for the once-a-second thread.
    (pk,) = put("mail")
    r = api_client.get("/jobs/next", {"queue": "other,mail2", "wait_ms": 0})
    assert r.status_code == 204
    assert set(ClaimScope.objects.values_list("scope", flat=True)) == {"other", "mail2"}
    assert waiting(api_client, pk)["reason"] == "no_workers"
    api_client.get("/jobs/next", {"queue": "mail", "wait_ms": 0})  # takes pk... then:
    (pk2,) = put("mail")
    assert waiting(api_client, pk2) == {
        "reason": "queued", "ahead": 0, "detail": "Next in line: the next claim of its queue "
        "takes it.",
    }  # fmt: skip
    assert waiting(api_client, pk) is None  # handed out


def test_claim_log__later_claims_of_the_second__noted_then_written_together(
    api_client, put, monkeypatch
) -> None:
    api_client.get("/jobs/next", {"queue": "mail", "wait_ms": 0})
    first = ClaimScope.objects.get(scope="mail").seen_at
    later = current_time() + timedelta(seconds=5)
    monkeypatch.setattr("broker.claimers.current_time", lambda: later)
    with CaptureQueriesContext(connection) as written:
        api_client.get("/jobs/next", {"queue": "mail", "wait_ms": 0})
        api_client.get("/jobs/next", {"queue": "mail", "wait_ms": 0})
    assert not [q for q in written.captured_queries if "broker_claimscope" in q["sql"]]
    assert ClaimScope.objects.get(scope="mail").seen_at == first  # noted, not yet written
    assert claim_log.flush() == 1
    assert ClaimScope.objects.get(scope="mail").seen_at == later


def test_waiting__queued__ahead_counts_ready_tasks_claimed_before_it(api_client, put) -> None:
    seen(EVERY_QUEUE)
    low = put("q", 2, priority="low")
    normal = put("q", 3)
    high = put("q", 1, priority="high")
    put("other", 5, priority="high")
    assert [waiting(api_client, pk)["ahead"] for pk in (*high, *normal, *low)] == [
        0, 1, 2, 3, 4, 5,
    ]  # fmt: skip
    assert waiting(api_client, low[1])["detail"] == "5 ready tasks of its queue go first."


def test_waiting__delayed__until_its_time(api_client, put) -> None:
    seen(EVERY_QUEUE)
    (pk,) = put("q", delay_ms=60_000)
    w = waiting(api_client, pk)
    assert w["reason"] == "delayed" and TIMESTAMP.match(w["until"])
    task = api_client.get(f"/jobs/{pk}").json()
    assert w["until"] == task["available_at"]
    assert w["detail"] == f"Enqueued with a delay: it becomes ready at {w['until']}."


def test_waiting__nacked__retry_backoff_until_the_retry(api_client, put, take) -> None:
    (pk,) = put("q", max_attempts=3)
    (d,) = take(["q"])
    r = api_client.post(f"/jobs/{pk}/nack?lease_id={d['lease_id']}", {"error": "x"}, format="json")
    assert r.status_code == 204
    w = waiting(api_client, pk)
    assert w["reason"] == "retry_backoff"
    assert w["until"] == api_client.get(f"/jobs/{pk}").json()["available_at"]


def test_waiting__paused_queue__queue_paused_before_every_later_reason(
    api_client, put, set_queue
) -> None:
    (pk,) = put("q")
    set_queue("q", paused=True, max_in_flight=1, rate_per_s=1)
    assert waiting(api_client, pk) == {
        "reason": "queue_paused", "detail": "The queue 'q' is paused: claims take nothing from it.",
    }  # fmt: skip
    (delayed,) = put("q", delay_ms=5000)
    assert waiting(api_client, delayed)["reason"] == "delayed"  # delayed comes first


def test_waiting__full_queue__queue_full_then_rate_limited(
    api_client, put, take, set_queue
) -> None:
    seen(EVERY_QUEUE)
    put("q", 3)
    set_queue("q", max_in_flight=1, rate_per_s=0.01)  # a token a 100 s: spent stays spent
    got = take(["q"])
    pk = put("q")[0]
    w = waiting(api_client, pk)
    assert w == {
        "reason": "queue_full",
        "detail": "The queue 'q' has 1 task handed out, its max_in_flight is 1.",
    }
    ack_all(api_client, got)
    assert waiting(api_client, pk)["reason"] == "rate_limited"  # its token is spent
    set_queue("q", rate_per_s=None)
    assert waiting(api_client, pk) == {
        "reason": "queued", "ahead": 2, "detail": "2 ready tasks of its queue go first.",
    }  # fmt: skip


def test_waiting__counts_of_one__singular(api_client, put, take, set_queue) -> None:
    seen(EVERY_QUEUE)
    set_queue("q", rate_per_s=1)
    _, second = put("q", 2)
    assert waiting(api_client, second) == {
        "reason": "queued", "ahead": 1, "detail": "1 ready task of its queue goes first.",
    }  # fmt: skip
    take(["q"])  # the second's token is spent for a second
    assert waiting(api_client, second) == {
        "reason": "rate_limited",
        "detail": "The queue 'q' hands out at most 1 task a second, and has just done so.",
    }


@pytest.mark.parametrize("state", ["handed_out", "done", "dead", "cancelled"])
def test_waiting__not_ready_or_delayed__null(api_client, put, take, state: str) -> None:
    (pk,) = put("q", max_attempts=1)
    if state != "cancelled":
        (d,) = take(["q"])
        if state == "done":
            ack_all(api_client, [d])
        elif state == "dead":
            api_client.post(f"/jobs/{pk}/nack?lease_id={d['lease_id']}")
    else:
        api_client.delete(f"/jobs/{pk}")
    body = api_client.get(f"/jobs/{pk}").json()
    assert body["state"] == state
    assert body["waiting"] is None


def test_waiting__listing_keeps_its_shape(api_client, put) -> None:
    put("q")
    (listed,) = api_client.get("/jobs").json()["results"]
    assert "waiting" not in listed


@pytest.mark.parametrize(
    "settings",
    [{"fair": True}, {"key_max_in_flight": 1}, {"fair": True, "key_max_in_flight": 2}, {}],
)
def test_waiting__keyed_queue__ahead_is_how_many_claims_come_before_it(
    api_client, put, take, settings: dict
) -> None:
    """`ahead` of each ready task is the number of single claims that hand out others before
    it, as the claims then do (a fair queue's rounds; a key at key_max_in_flight gives only its
    free slots)."""
    seen(EVERY_QUEUE)
    body = json.dumps(settings)
    assert api_client.patch("/queues/k", body, content_type="application/json").status_code == 200
    put("k", 6, key="big")
    put("k", 2, key="mid")
    put("k", 1)
    put("k", 2, key="late")
    held = take(["k"])  # big's first, kept: it holds a slot of its key
    assert held[0]["task"]["key"] == "big"
    put("k", 1, key="small", priority="high")
    ahead = {pk: waiting(api_client, pk) for pk in _ready(api_client)}
    order = []
    while True:
        delivered = take(["k"])
        if not delivered and held:
            ack_all(api_client, held)  # all else went: big's slot frees, its tasks go too
            held = []
            continue
        if not delivered:
            break
        order.append(delivered[0]["task"]["id"])
        ack_all(api_client, delivered)
    assert sorted(order) == sorted(ahead)
    assert {pk: w["ahead"] for pk, w in ahead.items() if w["reason"] == "queued"} == {
        pk: order.index(pk) for pk, w in ahead.items() if w["reason"] == "queued"
    }


def _ready(client) -> list[str]:
    return [t["id"] for t in client.get("/jobs?state=ready&queue=k&limit=100").json()["results"]]

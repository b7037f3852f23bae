"""GET /jobs/next: the delivery's exact shape, 204, parameters, caps, filters and order."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from broker.api import views
from tests.api.conftest import DELIVERED_KEYS, assert_ahead, parse_time
from tests.conftest import post

pytestmark = pytest.mark.django_db


def test_claim__ready_task__200_exact_shape(api_client, enqueue) -> None:
    task_id = enqueue(payload={"line": "hello"}, max_attempts=4, queue="q1", priority="low")
    before = datetime.now(UTC)
    r = api_client.get("/jobs/next?wait_ms=0&lease_ms=30000")
    after = datetime.now(UTC)
    assert r.status_code == 200
    body = r.json()
    assert list(body) == ["task", "lease_id", "deadline"]
    task = body["task"]
    assert list(task) == DELIVERED_KEYS
    assert {k: task[k] for k in list(task)[:7]} == {
        "id": task_id,
        "payload": {"line": "hello"},
        "attempts": 1,
        "max_attempts": 4,
        "queue": "q1",
        "priority": "low",
        "type": None,
    }
    assert (task["after"], task["parents"]) == ([], {})
    assert task["checkpoint"] is None  # a first delivery: nothing to resume from
    assert isinstance(body["lease_id"], str) and body["lease_id"]
    created = parse_time(task["created_at"])
    assert parse_time(task["available_at"]) == created
    assert before - timedelta(seconds=5) <= created <= before + timedelta(milliseconds=1)
    assert_ahead(body["deadline"], before, after, 30_000, 30_000)


def test_claim__nothing_ready__204_empty_body(api_client) -> None:
    r = api_client.get("/jobs/next?wait_ms=0")
    assert r.status_code == 204
    assert r.content == b""


def test_claim__short_wait_nothing_ready__204_after_the_wait(api_client) -> None:
    start = time.monotonic()
    r = api_client.get("/jobs/next?wait_ms=150")
    elapsed = time.monotonic() - start
    assert r.status_code == 204 and r.content == b""
    assert 0.14 <= elapsed < 2


def test_claim__wait_but_task_ready__answers_at_once(api_client, enqueue) -> None:
    enqueue()
    start = time.monotonic()
    r = api_client.get("/jobs/next?wait_ms=20000")
    assert r.status_code == 200
    assert time.monotonic() - start < 2


def test_claim__delayed_task__not_handed_out(api_client, enqueue) -> None:
    enqueue(delay_ms=60_000)
    assert api_client.get("/jobs/next?wait_ms=0").status_code == 204


def test_claim__handed_out_once_only(api_client, enqueue, claim) -> None:
    enqueue()
    claim()
    assert api_client.get("/jobs/next?wait_ms=0").status_code == 204


@pytest.fixture
def claim_args(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Records what the view asks the long-poll for, and answers 'nothing' at once."""
    seen: list[dict[str, Any]] = []

    def fake_claim_wait(queues: Any, **kwargs: Any) -> list[Any]:
        seen.append({"queues": queues, **kwargs})
        return []

    monkeypatch.setattr(views, "claim_wait", fake_claim_wait)
    return seen


@pytest.mark.parametrize(
    ("query", "wait_ms", "lease_ms"),
    [
        ("", 20_000, 30_000),
        ("?wait_ms=30000", 30_000, 30_000),
        ("?wait_ms=30001", 30_000, 30_000),
        ("?wait_ms=999999999", 30_000, 30_000),
        ("?wait_ms=0&lease_ms=1", 0, 1),
        ("?lease_ms=300001", 20_000, 300_000),
    ],
)
def test_claim__defaults_and_caps(api_client, claim_args, query, wait_ms, lease_ms) -> None:
    assert api_client.get(f"/jobs/next{query}").status_code == 204
    assert [(a["wait_ms"], a["lease_ms"]) for a in claim_args] == [(wait_ms, lease_ms)]


def test_claim__lease_ms_above_cap__deadline_five_minutes_out(api_client, enqueue) -> None:
    enqueue()
    before = datetime.now(UTC)
    body = api_client.get("/jobs/next?wait_ms=0&lease_ms=100000000").json()
    assert_ahead(body["deadline"], before, datetime.now(UTC), 300_000, 300_000)


@pytest.mark.parametrize(
    "query",
    [
        "wait_ms=-1",
        "wait_ms=1.5",
        "wait_ms=abc",
        "wait_ms=1e3",
        "wait_ms=+5",
        "lease_ms=-1",
        "lease_ms=0",
        "lease_ms=2.0",
        "lease_ms=x",
        "wait_ms=%EF%BC%91",
        "wait_ms=",
        "lease_ms=",
        "wait_ms=&queue=default",
    ],
)
def test_claim__bad_parameter__400_naming_it(api_client, enqueue, query: str) -> None:
    enqueue()
    r = api_client.get(f"/jobs/next?{query}")
    assert r.status_code == 400
    name = query.split("=")[0]
    assert list(r.json()["fields"]) == [name]
    assert api_client.get("/stats").json()["ready"] == 1


def test_claim__queue_filter__only_named_queues(api_client, enqueue, claim) -> None:
    enqueue(queue="a", payload="A")
    enqueue(queue="c", payload="C")
    enqueue(queue="b", payload="B")
    got = {claim(queue="a,b")["task"]["payload"] for _ in range(2)}
    assert got == {"A", "B"}
    assert api_client.get("/jobs/next?wait_ms=0&queue=a,b").status_code == 204
    assert claim(queue="c")["task"]["payload"] == "C"


def test_claim__no_queue_filter__any_queue(api_client, enqueue, claim) -> None:
    enqueue(queue="x")
    assert claim()["task"]["queue"] == "x"


@pytest.mark.parametrize("queue", ["a,b%20c", "", "a,,b", "a,"])
def test_claim__bad_queue_filter__400_and_nothing_handed_out(api_client, enqueue, queue) -> None:
    enqueue(queue="a")
    r = api_client.get(f"/jobs/next?wait_ms=0&queue={queue}")
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["queue"]
    assert api_client.get("/stats").json()["ready"] == 1


def test_claim__priority_high_normal_low_then_oldest(api_client, enqueue, claim) -> None:
    for name in ("low-1", "normal-1", "high-1", "low-2", "high-2", "normal-2"):
        enqueue(payload=name, priority=name.split("-")[0])
    order = [claim()["task"]["payload"] for _ in range(6)]
    assert order == ["high-1", "high-2", "normal-1", "normal-2", "low-1", "low-2"]


def test_claim__worker_header__shown_on_the_task(api_client, enqueue, task) -> None:
    task_id = enqueue()
    api_client.get("/jobs/next?wait_ms=0", HTTP_X_BROKER_WORKER="host-1:42")
    assert task(task_id)["worker"] == "host-1:42"


def test_claim__head_request__405_and_nothing_handed_out(api_client, enqueue, task) -> None:
    task_id = enqueue()
    r = api_client.head("/jobs/next?wait_ms=0")
    assert r.status_code == 405
    assert task(task_id)["state"] == "ready"


def test_claim__worker_header_with_nul__200_not_503(api_client, enqueue, task) -> None:
    task_id = enqueue()
    r = api_client.get("/jobs/next?wait_ms=0", HTTP_X_BROKER_WORKER="w\x00x")
    assert r.status_code == 200
    assert task(task_id)["worker"] == "w\ufffdx"


@pytest.mark.parametrize("how", ["get", "post"])
def test_claim__a_queue_named_twice__taken_from_once(api_client, put, how: str) -> None:
    ids = put("a", 3)
    if how == "post":
        r = post(api_client, "/jobs/claim", {"max": 2, "queues": ["a", "a"], "wait_ms": 0})
        got = [d["task"]["id"] for d in r.json()["deliveries"]]
        assert got == ids[:2]
    else:
        r = api_client.get("/jobs/next", {"queue": "a,a", "wait_ms": 0})
        assert r.json()["task"]["id"] == ids[0]

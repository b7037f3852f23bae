"""wait_for, POST /events and GET /events (API.md "Waiting for events, and approvals"): a task
blocked on its event, released with it in its deliveries; kept events matching later waits;
validation; grants; counters."""

from __future__ import annotations

from typing import Any

import pytest

from broker.tokens import making
from tests.api.conftest import TIMESTAMP
from tests.conftest import post

pytestmark = pytest.mark.django_db


def _enqueue(api_client, expect: int = 201, headers: Any = None, **body: Any) -> Any:
    body.setdefault("payload", {"n": 1})
    r = post(api_client, "/jobs", body, **(headers or {}))
    assert r.status_code == expect, r.content
    return r.json()


def _event(api_client, name: str = "paid", key: str = "o-1", data: Any = None, **kw: Any) -> Any:
    r = post(api_client, "/events", {"name": name, "key": key, "data": data}, **kw)
    assert r.status_code == 202, r.content
    return r.json()


def _task(api_client, pk: str) -> dict[str, Any]:
    return api_client.get(f"/jobs/{pk}").json()


def _totals(api_client) -> dict[str, int]:
    return api_client.get("/stats").json()["totals"]


def test_wait_for__blocked_until_its_event__released_with_the_event(api_client) -> None:
    pk = _enqueue(api_client, wait_for={"event": "paid", "key": "o-1"})["id"]
    body = _task(api_client, pk)
    assert (body["state"], body["event"]) == ("blocked", None)
    assert body["waiting"] == {
        "reason": "event",
        "event": "paid",
        "key": "o-1",
        "until": None,
        "detail": "Waits for the event 'paid' with key 'o-1', for ever.",
    }
    assert api_client.get("/jobs/next", {"wait_ms": 0}).status_code == 204
    assert _event(api_client, key="o-2")["released"] == 0  # another key
    answer = _event(api_client, data={"amount": 12, "nul": "a\u0000b"})
    assert answer["released"] == 1
    body = _task(api_client, pk)
    assert body["state"] == "ready"
    event = body["event"]
    assert event == {
        "id": answer["id"],
        "name": "paid",
        "key": "o-1",
        "data": {"amount": 12, "nul": "a\u0000b"},
        "at": event["at"],
    }
    assert TIMESTAMP.match(event["at"])
    delivered = api_client.get("/jobs/next", {"wait_ms": 0}).json()
    assert delivered["task"]["id"] == pk
    assert delivered["task"]["event"] == event
    totals = _totals(api_client)
    assert (totals["events"], totals["released"], totals["suspended"]) == (2, 1, 0)


def test_plain_task__event_null_in_deliveries(api_client) -> None:
    pk = _enqueue(api_client)["id"]
    assert _task(api_client, pk)["event"] is None
    assert api_client.get("/jobs/next", {"wait_ms": 0}).json()["task"]["event"] is None


def test_one_event__releases_every_waiter_of_its_name_and_key(api_client) -> None:
    ids = [_enqueue(api_client, wait_for={"event": "e", "key": "k"})["id"] for _ in range(3)]
    other = _enqueue(api_client, wait_for={"event": "f", "key": "k"})["id"]
    assert _event(api_client, "e", "k")["released"] == 3
    assert [_task(api_client, pk)["state"] for pk in ids] == ["ready"] * 3
    assert _task(api_client, other)["state"] == "blocked"
    stats = api_client.get("/stats").json()
    assert (stats["ready"], stats["blocked"]) == (3, 1)


def test_wait_for_with_delay__delayed_from_the_release(api_client, clock) -> None:
    pk = _enqueue(api_client, delay_ms=60_000, wait_for={"event": "e", "key": "k"})["id"]
    clock.advance(120_000)  # the delay counts from the release, not from the enqueue
    _event(api_client, "e", "k")
    body = _task(api_client, pk)
    assert body["state"] == "delayed"
    assert body["waiting"]["reason"] == "delayed"


def test_wait_for_with_after__released_when_both_hold(api_client) -> None:
    parent = _enqueue(api_client, queue="p")["id"]
    pk = _enqueue(api_client, after=[parent], wait_for={"event": "e", "key": "k"})["id"]
    assert _task(api_client, pk)["waiting"]["reason"] == "blocked"  # before `event`
    assert _event(api_client, "e", "k")["released"] == 1
    body = _task(api_client, pk)
    assert body["state"] == "blocked"  # still on its after
    assert body["event"]["name"] == "e"
    assert _totals(api_client)["released"] == 0
    lease = api_client.get("/jobs/next", {"wait_ms": 0, "queue": "p"}).json()["lease_id"]
    assert post(api_client, f"/jobs/{parent}/ack?lease_id={lease}").status_code == 204
    body = _task(api_client, pk)
    assert (body["state"], body["event"]["name"]) == ("ready", "e")


def test_after_done_first__then_blocked_on_its_event(api_client) -> None:
    parent = _enqueue(api_client, queue="p")["id"]
    pk = _enqueue(api_client, after=[parent], wait_for={"event": "e", "key": "k"})["id"]
    lease = api_client.get("/jobs/next", {"wait_ms": 0, "queue": "p"}).json()["lease_id"]
    assert post(api_client, f"/jobs/{parent}/ack?lease_id={lease}").status_code == 204
    body = _task(api_client, pk)
    assert (body["state"], body["waiting"]["reason"]) == ("blocked", "event")
    _event(api_client, "e", "k")
    assert _task(api_client, pk)["state"] == "ready"


def test_event_before_the_wait__kept_and_matched(api_client, clock) -> None:
    first = _event(api_client, "e", "k", data=1)
    clock.advance(10)
    second = _event(api_client, "e", "k", data=2)
    pk = _enqueue(api_client, wait_for={"event": "e", "key": "k"})["id"]
    body = _task(api_client, pk)
    assert body["state"] == "ready"
    assert (body["event"]["id"], body["event"]["data"]) == (second["id"], 2)
    assert first["id"] != second["id"]
    # A wait since after the kept events: blocked until the next one.
    clock.advance(10)
    since = api_client.get("/events").json()["results"][0]["at"]
    later = _enqueue(
        api_client, wait_for={"event": "e", "key": "k", "since": "2999-01-01T00:00:00Z"}
    )["id"]
    assert _task(api_client, later)["state"] == "blocked"
    at_or_after = _enqueue(api_client, wait_for={"event": "e", "key": "k", "since": since})["id"]
    assert _task(api_client, at_or_after)["event"]["id"] == second["id"]


def test_event_retention__older_events_are_not_matched_and_pruned(api_client, clock) -> None:
    from broker.queue import events

    _event(api_client, "e", "k")
    clock.advance(8 * 24 * 3600 * 1000)  # past the default 7d
    pk = _enqueue(api_client, wait_for={"event": "e", "key": "k"})["id"]
    assert _task(api_client, pk)["state"] == "blocked"
    assert events.prune_events(clock.now()) == 1
    assert api_client.get("/events").json()["results"] == []


@pytest.mark.parametrize(
    ("wait_for", "field"),
    [
        ({"key": "k"}, "wait_for.event"),
        ({"event": "e"}, "wait_for.key"),
        ({"event": "", "key": "k"}, "wait_for.event"),
        ({"event": "e" * 201, "key": "k"}, "wait_for.event"),
        ({"event": "e", "key": "k" * 256}, "wait_for.key"),
        ({"event": "e\u0000", "key": "k"}, "wait_for.event"),
        ({"event": "e", "key": "k", "timeout_ms": 0}, "wait_for.timeout_ms"),
        ({"event": "e", "key": "k", "timeout_ms": 30 * 86_400_000 + 1}, "wait_for.timeout_ms"),
        ({"event": "e", "key": "k", "on_timeout": "fail"}, "wait_for.on_timeout"),
        ({"event": "e", "key": "k", "since": "yesterday"}, "wait_for.since"),
        ({"event": "e", "key": "k", "since": "2026-01-01T00:00:00"}, "wait_for.since"),
        ({"event": "e", "key": "k", "extra": 1}, "wait_for.extra"),
        ("e", "wait_for"),
    ],
)
def test_wait_for__bad__400_naming_the_field(api_client, wait_for: Any, field: str) -> None:
    r = post(api_client, "/jobs", {"payload": 1, "wait_for": wait_for})
    assert r.status_code == 400, r.content
    assert field in r.json()["fields"], r.json()
    assert api_client.get("/stats").json()["totals"]["enqueued"] == 0


def test_wait_for_null__a_plain_task(api_client) -> None:
    pk = _enqueue(api_client, wait_for=None)["id"]
    assert _task(api_client, pk)["state"] == "ready"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"key": "k"}, "name"),
        ({"name": "e"}, "key"),
        ({"name": "", "key": "k"}, "name"),
        ({"name": "e", "key": "k" * 256}, "key"),
        ({"name": "e", "key": "k", "data": "x" * 65_536}, "data"),
        ({"name": "e", "key": "k", "extra": 1}, "extra"),
        ({"name": 1, "key": "k"}, "name"),
    ],
)
def test_post_event__bad__400(api_client, body: dict[str, Any], field: str) -> None:
    r = post(api_client, "/events", body)
    assert r.status_code == 400, r.content
    assert field in r.json()["fields"]
    assert api_client.get("/events").json()["results"] == []


def test_get_events__newest_first__filtered__paged(api_client) -> None:
    made = [_event(api_client, "e", f"k{n % 2}", data=n)["id"] for n in range(5)]
    _event(api_client, "f", "k0")
    listed = api_client.get("/events", {"name": "e"}).json()
    assert [e["id"] for e in listed["results"]] == made[::-1]
    assert set(listed["results"][0]) == {"id", "name", "key", "data", "at"}
    both = api_client.get("/events", {"name": "e", "key": "k0"}).json()["results"]
    assert [e["data"] for e in both] == [4, 2, 0]
    page = api_client.get("/events", {"limit": 2}).json()
    assert len(page["results"]) == 2 and page["next"]
    rest = api_client.get(page["next"]).json()
    assert len(rest["results"]) == 2
    assert api_client.get("/events", {"limit": 0}).status_code == 400


APPROVE = {"payload": 1, "wait_for": {"event": "approval", "key": "o"}}


def test_batch_items_and_workflow_steps__wait_for(api_client) -> None:
    r = post(
        api_client,
        "/jobs/batch",
        {"jobs": [{"payload": 1}, {"payload": 2, "wait_for": {"event": "e", "key": "b"}}]},
    )
    assert r.status_code == 201, r.content
    plain, waiting = r.json()["ids"]
    bad = post(api_client, "/jobs/batch", {"jobs": [{"payload": 1, "wait_for": {"key": "b"}}]})
    assert "jobs.0.wait_for.event" in bad.json()["fields"]
    r = post(
        api_client,
        "/workflows",
        {"name": "order", "steps": [
            {"ref": "approve", "job": APPROVE},
            {"ref": "ship", "job": {"payload": 2}, "after": ["approve"]},
        ]},
    )  # fmt: skip
    assert r.status_code == 201, r.content
    approve, ship = r.json()["tasks"]["approve"], r.json()["tasks"]["ship"]
    assert [_task(api_client, pk)["state"] for pk in (plain, waiting, approve, ship)] == [
        "ready", "blocked", "blocked", "blocked"
    ]  # fmt: skip
    assert _event(api_client, "e", "b")["released"] == 1
    assert _event(api_client, "approval", "o", {"approved": True})["released"] == 1
    assert [_task(api_client, pk)["state"] for pk in (waiting, approve, ship)] == [
        "ready", "ready", "blocked"
    ]  # fmt: skip


def test_cancel_a_waiting_task__an_event_later_moves_nothing(api_client) -> None:
    pk = _enqueue(api_client, wait_for={"event": "e", "key": "k"})["id"]
    assert api_client.delete(f"/jobs/{pk}").status_code == 204
    assert _event(api_client, "e", "k")["released"] == 0
    assert _task(api_client, pk)["state"] == "cancelled"


def _bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def test_grants__an_event_releases_only_its_tokens_queues(api_client) -> None:
    ours = _enqueue(api_client, queue="a.1", wait_for={"event": "e", "key": "k"})["id"]
    theirs = _enqueue(api_client, queue="b.1", wait_for={"event": "e", "key": "k"})["id"]
    producer = making.make("producer", ["produce:a.*"]).secret
    reader = making.make("reader", ["read:*"]).secret
    assert _event(api_client, "e", "k", **_bearer(producer))["released"] == 1
    admin = making.make("admin", ["all:*"]).secret
    states = [
        api_client.get(f"/jobs/{pk}", **_bearer(admin)).json()["state"] for pk in (ours, theirs)
    ]
    assert states == ["ready", "blocked"]
    # The kept event matches later waits of its token's queues only.
    wait = {"event": "e", "key": "k"}
    later_ours = _enqueue(api_client, queue="a.2", wait_for=wait, headers=_bearer(admin))["id"]
    later_theirs = _enqueue(api_client, queue="b.2", wait_for=wait, headers=_bearer(admin))["id"]
    states = [
        api_client.get(f"/jobs/{pk}", **_bearer(admin)).json()["state"]
        for pk in (later_ours, later_theirs)
    ]
    assert states == ["ready", "blocked"]
    r = post(api_client, "/events", {"name": "e", "key": "k"}, **_bearer(reader))
    assert r.status_code == 403
    assert api_client.get("/events", **_bearer(reader)).status_code == 200
    assert api_client.get("/events", **_bearer(producer)).status_code == 403


def test_metrics__events_received_and_jobs_suspended(api_client) -> None:
    _event(api_client, "e", "k")
    pk = _enqueue(api_client)["id"]
    lease = api_client.get("/jobs/next", {"wait_ms": 0}).json()["lease_id"]
    r = post(api_client, f"/jobs/{pk}/wait?lease_id={lease}", {"event": "f", "key": "k"})
    assert r.status_code == 200
    lines = api_client.get("/metrics").content.decode().splitlines()
    assert "events_received_total 1.0" in lines
    assert "jobs_suspended_total 1.0" in lines


def test_broker_enqueue__wait_for__blocked_until_the_event(api_client) -> None:
    import broker
    from broker.exceptions import InvalidTaskError

    pk = broker.enqueue({"n": 1}, wait_for={"event": "e", "key": "k", "timeout_ms": 1000})
    body = _task(api_client, pk)
    assert (body["state"], body["waiting"]["reason"]) == ("blocked", "event")
    assert body["waiting"]["until"] is not None
    with pytest.raises(InvalidTaskError) as refused:
        broker.enqueue({"n": 1}, wait_for={"event": "e"})
    assert "wait_for.key" in refused.value.fields

"""GET /jobs filters, limits and walks by cursor; GET /jobs/{id} shows errors, result, holder."""

from __future__ import annotations

import re
from datetime import datetime
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import override_settings

from broker import queue
from broker.api.parsing import dump_json
from broker.queue import NewTask
from tests.conftest import post

pytestmark = pytest.mark.django_db

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def ids_of(body: dict) -> list[str]:
    return [t["id"] for t in body["results"]]


def at(text: str) -> datetime:
    assert TIMESTAMP.match(text), text
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def page_path(next_url: str) -> str:
    parts = urlsplit(next_url)
    return f"{parts.path}?{parts.query}"


def many(n: int, **fields) -> list[str]:
    return [str(pk) for pk in queue.enqueue_many([NewTask(payload="{}", **fields)] * n)]


def test_list__filters_combine(api_client, enqueue, claim, monkeypatch) -> None:
    from contract.jobtypes import SPECS

    monkeypatch.setitem(SPECS, "echo", object())
    a_ready = enqueue(queue="a")
    a_echo = enqueue(queue="a", type="echo")
    b_echo = enqueue(queue="b", type="echo")
    enqueue(queue="b", delay_ms=60_000)
    claimed = claim(queue="b")
    assert claimed["task"]["id"] == b_echo
    assert ids_of(api_client.get("/jobs?queue=a").json()) == [a_echo, a_ready]
    assert ids_of(api_client.get("/jobs?type=echo").json()) == [b_echo, a_echo]
    assert ids_of(api_client.get("/jobs?type=echo&state=ready").json()) == [a_echo]
    assert ids_of(api_client.get("/jobs?type=echo&queue=b&state=handed_out").json()) == [b_echo]
    assert ids_of(api_client.get("/jobs?queue=a&state=delayed").json()) == []


def test_list__limit_default_50_and_above_500_capped(api_client) -> None:
    many(501)
    assert len(api_client.get("/jobs").json()["results"]) == 50
    assert len(api_client.get("/jobs?limit=7").json()["results"]) == 7
    body = api_client.get("/jobs?limit=100000").json()
    assert len(body["results"]) == 500
    assert body["next"] is not None


@pytest.mark.parametrize("limit", ["0", "-1", "1.5", "ten", "٣"])
def test_list__bad_limit__400_naming_limit(api_client, limit: str) -> None:
    r = api_client.get("/jobs", {"limit": limit})
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["limit"]


@pytest.mark.parametrize("cursor", ["abc", "-3", "1.0", "01", "9" * 30])
def test_list__bad_cursor__400_naming_cursor(api_client, cursor: str) -> None:
    r = api_client.get("/jobs", {"cursor": cursor})
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["cursor"]


def test_list__cursor_walk__each_task_once_while_tasks_are_added(api_client, enqueue) -> None:
    existing = [enqueue(payload={"i": i}) for i in range(23)]
    seen: list[str] = []
    added: list[str] = []
    url = "/jobs?limit=5"
    while url:
        body = api_client.get(url).json()
        assert len(body["results"]) <= 5
        seen += ids_of(body)
        added += [enqueue(payload={"added": True}), enqueue(payload={"added": True})]
        url = page_path(body["next"]) if body["next"] else ""
    # Newest first, nothing twice, nothing missed; tasks added mid-walk are newer than the walk.
    assert seen == list(reversed(existing))
    assert not set(added) & set(seen)


def test_list__next_keeps_filters_and_limit(api_client, enqueue) -> None:
    ids = [enqueue(queue="q") for _ in range(3)]
    enqueue(queue="other")
    body = api_client.get("/jobs?queue=q&limit=2").json()
    assert ids_of(body) == [ids[2], ids[1]]
    query = parse_qs(urlsplit(body["next"]).query)
    assert query["queue"] == ["q"] and query["limit"] == ["2"]
    last = api_client.get(page_path(body["next"])).json()
    assert ids_of(last) == [ids[0]]
    assert last["next"] is None


def test_list__exactly_limit_tasks__no_next(api_client, enqueue) -> None:
    for _ in range(3):
        enqueue()
    assert api_client.get("/jobs?limit=3").json()["next"] is None


def test_get__shows_every_attempts_error_in_order(api_client, enqueue, claim, task) -> None:
    pk = enqueue(max_attempts=3)
    with override_settings(BROKER_RETRY_BASE_MS=0, BROKER_RETRY_MAX_MS=0):
        for n in (1, 2):
            d = claim()
            r = post(api_client, f"/jobs/{pk}/nack?lease_id={d['lease_id']}", {"error": f"e{n}"})
            assert r.status_code == 204
            assert queue.promote_delayed() == 1
    shown = task(pk)
    assert shown["state"] == "ready"
    assert shown["attempts"] == 2
    assert [(e["attempt"], e["error"]) for e in shown["errors"]] == [(1, "e1"), (2, "e2")]
    assert at(shown["errors"][0]["at"]) <= at(shown["errors"][1]["at"])
    assert shown["last_error"] == "e2"
    assert shown["result"] is None


def test_get__handed_out__names_holder_and_deadline_then_clears(
    api_client, enqueue, claim, task
) -> None:
    pk = enqueue()
    d = claim(headers={"X-Broker-Worker": "host-1:42:worker-2"}, lease_ms=60_000)
    held = task(pk)
    assert held["state"] == "handed_out"
    assert held["worker"] == "host-1:42:worker-2"
    assert held["lease_deadline"] == d["deadline"]
    assert "lease_id" not in held  # whoever can read the task must not be able to ack it
    post(api_client, f"/jobs/{pk}/ack?lease_id={d['lease_id']}", {"result": {"ok": 1}})
    done = task(pk)
    assert (done["state"], done["worker"], done["lease_deadline"]) == ("done", None, None)
    assert done["result"] == {"ok": 1}


def test_get__timestamps_rfc3339_ms_utc_and_ordered(enqueue, claim, task) -> None:
    pk = enqueue(payload={"x": 1}, delay_ms=0)
    fresh = task(pk)
    claim()
    later = task(pk)
    assert at(fresh["created_at"]) == at(fresh["updated_at"]) == at(fresh["available_at"])
    assert at(later["updated_at"]) >= at(fresh["updated_at"])
    assert later["created_at"] == fresh["created_at"]


def test_get__payload_and_fields_as_enqueued(enqueue, task) -> None:
    pk = enqueue(
        payload={"s": "é\u0000", "n": [1, 2.5, None]}, queue="mail", priority="high", max_attempts=7
    )
    shown = task(pk)
    assert shown["payload"] == {"s": "é\u0000", "n": [1, 2.5, None]}
    assert (shown["queue"], shown["priority"], shown["max_attempts"]) == ("mail", "high", 7)
    assert (shown["state"], shown["attempts"], shown["errors"]) == ("ready", 0, [])


@pytest.mark.parametrize("path", ["/jobs/999999", "/jobs/abc", "/jobs/0"])
def test_get__unknown__404_json(api_client, path: str) -> None:
    r = api_client.get(path)
    assert r.status_code == 404
    assert r["Content-Type"].startswith("application/json")
    assert r.json()["error"]


def test_get__task_made_by_the_service_layer_is_listed(api_client) -> None:
    pk, _ = queue.enqueue(NewTask(payload=dump_json([1])))
    assert ids_of(api_client.get("/jobs").json()) == [str(pk)]

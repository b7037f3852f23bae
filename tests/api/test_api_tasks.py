"""GET /jobs (list), GET /jobs/{id} and DELETE /jobs/{id} (cancel)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from broker import queue
from tests.api.conftest import DELIVERED_KEYS, parse_time
from tests.conftest import post

pytestmark = pytest.mark.django_db

LISTED_KEYS = {
    *DELIVERED_KEYS, "state", "errors", "last_error", "result", "updated_at", "progress",
}  # fmt: skip


def ids_of(body: dict) -> list[str]:
    return [t["id"] for t in body["results"]]


def test_list__newest_first_with_listed_fields(api_client, enqueue) -> None:
    first, second, third = enqueue(), enqueue(), enqueue()
    r = api_client.get("/jobs")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"results", "next"}
    assert ids_of(body) == [third, second, first]
    assert body["next"] is None
    for listed in body["results"]:
        assert LISTED_KEYS <= set(listed)
        parse_time(listed["updated_at"])


def test_list__empty__200_no_results(api_client) -> None:
    assert api_client.get("/jobs").json() == {"results": [], "next": None}


def test_list__filters_state_queue_type(api_client, enqueue, claim) -> None:
    first_a = enqueue(queue="a")
    delayed_b = enqueue(queue="b", delay_ms=60_000)
    second_a = enqueue(queue="a")
    ready_c = enqueue(queue="c")
    claim(queue="a")
    claim(queue="a")
    handed_out = api_client.get("/jobs?state=handed_out").json()["results"]
    assert [(t["id"], t["state"]) for t in handed_out] == [
        (second_a, "handed_out"),
        (first_a, "handed_out"),
    ]
    assert ids_of(api_client.get("/jobs?state=delayed").json()) == [delayed_b]
    assert ids_of(api_client.get("/jobs?state=ready").json()) == [ready_c]
    assert ids_of(api_client.get("/jobs?queue=b").json()) == [delayed_b]
    assert ids_of(api_client.get("/jobs?queue=a&state=handed_out").json()) == [second_a, first_a]
    assert ids_of(api_client.get("/jobs?type=nothing").json()) == []


def test_list__type_filter(api_client, enqueue, monkeypatch) -> None:
    from contract.jobtypes import SPECS

    monkeypatch.setitem(SPECS, "echo", object())
    typed = enqueue(type="echo")
    enqueue()
    assert ids_of(api_client.get("/jobs?type=echo").json()) == [typed]


def test_list__bad_state_filter__400(api_client) -> None:
    r = api_client.get("/jobs?state=finished")
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["state"]


@pytest.mark.parametrize("query", ["queue=a%20b", "queue=a%00", "queue=" + "q" * 65, "type=a%00b"])
@pytest.mark.parametrize("path", ["/jobs", "/dlq"])
def test_list__bad_queue_or_type_filter__400(api_client, path: str, query: str) -> None:
    r = api_client.get(f"{path}?{query}")
    assert r.status_code == 400
    assert list(r.json()["fields"]) == [query.split("=")[0]]


@pytest.mark.parametrize("query", ["limit=0", "limit=-1", "limit=x", "limit=", "cursor=abc"])
@pytest.mark.parametrize("path", ["/jobs", "/dlq"])
def test_list__bad_limit_or_cursor__400(api_client, path: str, query: str) -> None:
    r = api_client.get(f"{path}?{query}")
    assert r.status_code == 400
    assert list(r.json()["fields"]) == [query.split("=")[0]]


def test_list__pages_by_limit__each_task_once_then_next_null(api_client, enqueue) -> None:
    made = [enqueue() for _ in range(5)]
    seen: list[str] = []
    url: str | None = "/jobs?limit=2"
    pages = 0
    while url:
        body = api_client.get(url).json()
        seen += ids_of(body)
        pages += 1
        url = body["next"]
        if url:
            parts = urlsplit(url)
            assert "limit=2" in parts.query
            url = f"{parts.path}?{parts.query}"
    assert pages == 3
    assert seen == made[::-1]


def test_list__limit_over_500__capped(api_client, enqueue) -> None:
    enqueue()
    assert api_client.get("/jobs?limit=100000").status_code == 200


def test_get__one_task__200(api_client, enqueue) -> None:
    task_id = enqueue(payload={"x": [1]}, queue="q")
    r = api_client.get(f"/jobs/{task_id}")
    assert r.status_code == 200
    body = r.json()
    assert LISTED_KEYS <= set(body)
    assert (body["id"], body["payload"], body["queue"], body["state"]) == (
        task_id,
        {"x": [1]},
        "q",
        "ready",
    )


@pytest.mark.parametrize("task_id", ["987654", "abc", "01", "99999999999999999999999"])
def test_get__unknown__404_json(api_client, task_id: str) -> None:
    r = api_client.get(f"/jobs/{task_id}")
    assert r.status_code == 404
    assert r.json()["error"]


@pytest.mark.parametrize("state", ["ready", "delayed", "handed_out"])
def test_delete__cancellable__204_cancelled(api_client, enqueue, claim, task, state) -> None:
    task_id = enqueue(delay_ms=60_000 if state == "delayed" else 0)
    if state == "handed_out":
        claim()
    r = api_client.delete(f"/jobs/{task_id}")
    assert r.status_code == 204 and r.content == b""
    assert task(task_id)["state"] == "cancelled"
    assert queue.totals()["cancelled"] == 1
    assert api_client.get("/jobs/next?wait_ms=0").status_code == 204


def test_delete__handed_out__worker_ack_and_nack_then_404(api_client, enqueue, claim) -> None:
    task_id = enqueue()
    lease = claim()["lease_id"]
    assert api_client.delete(f"/jobs/{task_id}").status_code == 204
    assert post(api_client, f"/jobs/{task_id}/ack?lease_id={lease}").status_code == 404
    assert post(api_client, f"/jobs/{task_id}/nack?lease_id={lease}").status_code == 404


@pytest.mark.parametrize("state", ["done", "dead", "cancelled"])
def test_delete__done_dead_or_cancelled__409(api_client, enqueue, claim, task, state) -> None:
    task_id = enqueue(max_attempts=1)
    if state == "cancelled":
        api_client.delete(f"/jobs/{task_id}")
    else:
        lease = claim()["lease_id"]
        post(api_client, f"/jobs/{task_id}/{'ack' if state == 'done' else 'nack'}?lease_id={lease}")
    r = api_client.delete(f"/jobs/{task_id}")
    assert r.status_code == 409
    assert r.json()["error"]
    assert task(task_id)["state"] == state


def test_delete__unknown__404(api_client) -> None:
    r = api_client.delete("/jobs/987654")
    assert r.status_code == 404
    assert r.json()["error"]

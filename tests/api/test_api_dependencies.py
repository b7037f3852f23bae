"""POST /jobs with `after`: validation, the blocked state in answers, deliveries with parents,
`waiting`, cancel cascades, and the new gauge and counter (API.md "Dependencies")."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import post

pytestmark = pytest.mark.django_db


def _run(api_client, task_id: str, how: str = "ack", result: Any = None) -> None:
    """Claim task_id from its queue (named after it) and ack or nack it."""
    r = api_client.get("/jobs/next", {"queue": f"q{task_id}", "wait_ms": 0})
    assert r.status_code == 200, r.content
    d = r.json()
    assert d["task"]["id"] == task_id
    body = {"result": result} if how == "ack" else {"error": "boom"}
    r = post(api_client, f"/jobs/{task_id}/{how}?lease_id={d['lease_id']}", body)
    assert r.status_code == 204


def _new(api_client, **body: Any) -> str:
    """Enqueue into queue q<next id>: ids come in order, so the queue names the task."""
    body.setdefault("payload", {"n": 1})
    probe = post(api_client, "/jobs", {"payload": 0, "queue": "probe"}).json()["id"]
    body["queue"] = f"q{int(probe) + 1}"
    r = post(api_client, "/jobs", body)
    assert r.status_code == 201, r.content
    assert r.json()["id"] == str(int(probe) + 1)
    return r.json()["id"]


def test_post__after_an_unfinished_task__201_blocked_with_after_and_policy(api_client) -> None:
    parent = _new(api_client)
    child = _new(api_client, after=[parent], after_policy="finished")
    body = api_client.get(f"/jobs/{child}").json()
    assert (body["state"], body["after"], body["after_policy"]) == ("blocked", [parent], "finished")
    assert body["parents"] == {parent: {"state": "ready", "result": None}}
    assert (body["workflow"], body["ref"]) == (None, None)
    assert body["waiting"] == {
        "reason": "blocked",
        "on": [parent],
        "detail": f"Waits for task {parent} to finish.",
    }
    plain = api_client.get(f"/jobs/{parent}").json()
    assert (plain["after"], plain["parents"], plain["after_policy"]) == ([], {}, "done")


@pytest.mark.parametrize(
    ("after", "field"),
    [
        ([], "after"),
        ("1", "after"),
        ([1], "after.0"),
        (["x"], "after.0"),
        (["007"], "after.0"),
        ([str(n) for n in range(101)], "after"),
    ],
)
def test_post__malformed_after__400_naming_it(api_client, after: Any, field: str) -> None:
    r = post(api_client, "/jobs", {"payload": 1, "after": after})
    assert r.status_code == 400
    assert field in r.json()["fields"], r.json()


def test_post__repeated_unknown_or_cancelled_parent__400_naming_the_item(api_client) -> None:
    parent = _new(api_client)
    r = post(api_client, "/jobs", {"payload": 1, "after": [parent, parent]})
    assert (r.status_code, list(r.json()["fields"])) == (400, ["after.1"])
    r = post(api_client, "/jobs", {"payload": 1, "after": [parent, "999999999"]})
    assert r.status_code == 400
    assert r.json()["fields"] == {"after.1": ["No such task."]}
    assert api_client.delete(f"/jobs/{parent}").status_code == 204
    r = post(api_client, "/jobs", {"payload": 1, "after": [parent]})
    assert (r.status_code, list(r.json()["fields"])) == (400, ["after.0"])
    r = post(api_client, "/jobs", {"payload": 1, "after": [parent], "after_policy": "finished"})
    assert r.status_code == 201
    assert api_client.get(f"/jobs/{r.json()['id']}").json()["state"] == "ready"


def test_post__bad_policy_or_null_after__400_or_plain(api_client) -> None:
    r = post(api_client, "/jobs", {"payload": 1, "after_policy": "sometimes"})
    assert (r.status_code, list(r.json()["fields"])) == (400, ["after_policy"])
    r = post(api_client, "/jobs", {"payload": 1, "after": None})
    assert r.status_code == 201
    assert api_client.get(f"/jobs/{r.json()['id']}").json()["state"] == "ready"


def test_ack_of_the_parent__child_ready_and_delivered_with_its_parents(api_client) -> None:
    a, b = _new(api_client), _new(api_client)
    child = _new(api_client, after=[a, b])
    _run(api_client, a, result={"rows": 3})
    assert api_client.get(f"/jobs/{child}").json()["waiting"]["on"] == [b]
    _run(api_client, b, result="ok")
    r = api_client.get("/jobs/next", {"queue": f"q{child}", "wait_ms": 0})
    task = r.json()["task"]
    assert task["after"] == [a, b]
    assert task["parents"] == {
        a: {"state": "done", "result": {"rows": 3}},
        b: {"state": "done", "result": "ok"},
    }


def test_dead_parent__waiting_parent_dead_then_requeue_and_ack_releases(api_client) -> None:
    parent = _new(api_client, max_attempts=1)
    child = _new(api_client, after=[parent])
    _run(api_client, parent, "nack")
    waiting = api_client.get(f"/jobs/{child}").json()["waiting"]
    assert (waiting["reason"], waiting["on"]) == ("parent_dead", [parent])
    assert "dead-letter queue" in waiting["detail"]
    assert post(api_client, f"/dlq/{parent}/requeue").status_code == 204
    _run(api_client, parent)
    assert api_client.get(f"/jobs/{child}").json()["state"] == "ready"


def test_delete__blocked_task__204_and_its_done_waiters_cancelled(api_client) -> None:
    parent = _new(api_client)
    child = _new(api_client, after=[parent])
    grandchild = _new(api_client, after=[child])
    assert api_client.delete(f"/jobs/{child}").status_code == 204
    states = [api_client.get(f"/jobs/{pk}").json()["state"] for pk in (parent, child, grandchild)]
    assert states == ["ready", "cancelled", "cancelled"]
    assert api_client.delete(f"/jobs/{grandchild}").status_code == 409


def test_list__state_blocked__only_blocked_tasks(api_client) -> None:
    parent = _new(api_client)
    children = [_new(api_client, after=[parent]) for _ in range(2)]
    r = api_client.get("/jobs", {"state": "blocked"})
    assert [t["id"] for t in r.json()["results"]] == children[::-1]


def test_batch__after_in_items__blocked_and_bad_item_named_by_index(api_client) -> None:
    parent = _new(api_client)
    r = post(
        api_client, "/jobs/batch", {"jobs": [{"payload": 1}, {"payload": 2, "after": [parent]}]}
    )
    assert r.status_code == 201
    ids = r.json()["ids"]
    assert [api_client.get(f"/jobs/{i}").json()["state"] for i in ids] == ["ready", "blocked"]
    bad = {"jobs": [{"payload": 1}, {"payload": 2, "after": [parent, "999999999"]}]}
    r = post(api_client, "/jobs/batch", bad)
    assert r.status_code == 400
    assert r.json()["fields"] == {"jobs.1.after.1": ["No such task."]}
    r = post(api_client, "/jobs/batch", {"jobs": [{"payload": 2, "after": "x"}]})
    assert list(r.json()["fields"]) == ["jobs.0.after"]


def test_counters__blocked_gauge_and_released_total_in_stats_queues_metrics(api_client) -> None:
    parent = _new(api_client)
    child = _new(api_client, after=[parent])
    stats = api_client.get("/stats").json()
    queue_name = f"q{child}"
    assert stats["blocked"] == 1 and stats["queues"][queue_name]["blocked"] == 1
    assert api_client.get(f"/queues/{queue_name}").json()["blocked"] == 1
    metrics = api_client.get("/metrics").content.decode()
    assert f'queue_blocked_jobs{{queue="{queue_name}"}} 1.0' in metrics
    _run(api_client, parent)
    stats = api_client.get("/stats").json()
    assert (stats["blocked"], stats["totals"]["released"]) == (0, 1)
    assert "jobs_released_total 1.0" in api_client.get("/metrics").content.decode()
    assert stats["totals"]["enqueued"] - stats["totals"]["acked"] - stats["totals"][
        "cancelled"
    ] == sum(stats[g] for g in ("ready", "handed_out", "delayed", "dead", "blocked"))

"""POST/GET/DELETE /workflows: a graph in one call, all or nothing, its state, its steps."""

from __future__ import annotations

from typing import Any

import pytest

from broker.models import Dependency, Task, Workflow
from tests.api.conftest import TIMESTAMP
from tests.conftest import post

pytestmark = pytest.mark.django_db


def diamond(queue: str = "wf") -> dict[str, Any]:
    """extract → (left, right) → load."""
    job = {"payload": {"n": 1}, "queue": queue}
    return {
        "name": "nightly-etl",
        "steps": [
            {"ref": "extract", "job": job},
            {"ref": "left", "job": job, "after": ["extract"]},
            {"ref": "right", "job": {**job, "priority": "high"}, "after": ["extract"]},
            {"ref": "load", "job": job, "after": ["left", "right"], "after_policy": "done"},
        ],
    }


def submit(api_client, body: dict[str, Any]) -> dict[str, Any]:
    r = post(api_client, "/workflows", body)
    assert r.status_code == 201, r.content
    assert r["Location"] == f"/workflows/{r.json()['id']}"
    return r.json()


def work(api_client, queue: str, how: str = "ack") -> str:
    r = api_client.get("/jobs/next", {"queue": queue, "wait_ms": 0})
    assert r.status_code == 200, r.content
    d = r.json()
    body = {"result": d["task"]["id"]} if how == "ack" else {"error": "boom"}
    r = post(api_client, f"/jobs/{d['task']['id']}/{how}?lease_id={d['lease_id']}", body)
    assert r.status_code == 204
    return d["task"]["id"]


def test_post__diamond__201_every_ref_a_task_blocked_but_the_first(api_client) -> None:
    answer = submit(api_client, diamond())
    assert list(answer["tasks"]) == ["extract", "left", "right", "load"]
    wf = api_client.get(f"/workflows/{answer['id']}").json()
    assert set(wf) == {"id", "name", "state", "created_at", "updated_at", "counts", "steps"}
    assert (wf["id"], wf["name"], wf["state"]) == (answer["id"], "nightly-etl", "running")
    assert TIMESTAMP.match(wf["created_at"]) and TIMESTAMP.match(wf["updated_at"])
    assert wf["counts"]["ready"] == 1 and wf["counts"]["blocked"] == 3
    assert wf["steps"] == [
        {"ref": "extract", "id": answer["tasks"]["extract"], "state": "ready", "after": [],
         "attempts": 0, "last_error": None},
        {"ref": "left", "id": answer["tasks"]["left"], "state": "blocked", "after": ["extract"],
         "attempts": 0, "last_error": None},
        {"ref": "right", "id": answer["tasks"]["right"], "state": "blocked",
         "after": ["extract"], "attempts": 0, "last_error": None},
        {"ref": "load", "id": answer["tasks"]["load"], "state": "blocked",
         "after": ["left", "right"], "attempts": 0, "last_error": None},
    ]  # fmt: skip
    load = api_client.get(f"/jobs/{answer['tasks']['load']}").json()
    assert (load["workflow"], load["ref"], load["after_policy"]) == (answer["id"], "load", "done")
    assert load["after"] == [answer["tasks"]["left"], answer["tasks"]["right"]]
    listed = api_client.get("/jobs", {"workflow": answer["id"]}).json()["results"]
    assert [t["ref"] for t in listed] == ["load", "right", "left", "extract"]


def test_diamond__run_to_the_end__steps_released_in_order_state_succeeded(api_client) -> None:
    answer = submit(api_client, diamond())
    assert work(api_client, "wf") == answer["tasks"]["extract"]
    assert {work(api_client, "wf"), work(api_client, "wf")} == {
        answer["tasks"]["left"], answer["tasks"]["right"],
    }  # fmt: skip
    r = api_client.get("/jobs/next", {"queue": "wf", "wait_ms": 0})
    task = r.json()["task"]
    assert task["id"] == answer["tasks"]["load"]
    assert task["parents"] == {
        answer["tasks"]["left"]: {"state": "done", "result": answer["tasks"]["left"]},
        answer["tasks"]["right"]: {"state": "done", "result": answer["tasks"]["right"]},
    }
    post(api_client, f"/jobs/{task['id']}/ack?lease_id={r.json()['lease_id']}")
    wf = api_client.get(f"/workflows/{answer['id']}").json()
    assert wf["state"] == "succeeded"
    assert wf["counts"] == {
        "blocked": 0, "ready": 0, "handed_out": 0, "delayed": 0, "dead": 0, "done": 4,
        "cancelled": 0,
    }  # fmt: skip


def test_failed_step__workflow_failed_then_requeued_runs_on(api_client) -> None:
    body = diamond()
    body["steps"][0]["job"]["max_attempts"] = 1
    answer = submit(api_client, body)
    work(api_client, "wf", "nack")
    wf = api_client.get(f"/workflows/{answer['id']}").json()
    assert wf["state"] == "failed"
    assert wf["steps"][0]["last_error"] == "boom"
    assert post(api_client, f"/dlq/{answer['tasks']['extract']}/requeue").status_code == 204
    assert api_client.get(f"/workflows/{answer['id']}").json()["state"] == "running"
    work(api_client, "wf")
    assert api_client.get(f"/jobs/{answer['tasks']['left']}").json()["state"] == "ready"


def test_delete__cancels_every_step_left__then_409_404(api_client) -> None:
    answer = submit(api_client, diamond())
    work(api_client, "wf")
    assert api_client.delete(f"/workflows/{answer['id']}").status_code == 204
    wf = api_client.get(f"/workflows/{answer['id']}").json()
    assert [s["state"] for s in wf["steps"]] == ["done", "cancelled", "cancelled", "cancelled"]
    assert wf["state"] == "cancelled"
    r = api_client.delete(f"/workflows/{answer['id']}")
    assert r.status_code == 409 and r.json()["error"]
    assert api_client.delete("/workflows/999999").status_code == 404
    assert api_client.get("/workflows/999999").json() == {"error": "No such workflow."}
    assert api_client.get("/workflows/abc").status_code == 404


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: b.update(name=""), "name"),
        (lambda b: b.update(name="x" * 201), "name"),
        (lambda b: b.update(steps=[]), "steps"),
        (lambda b: b.update(extra=1), "extra"),
        (lambda b: b["steps"][1].update(ref="extract"), "steps.1.ref"),
        (lambda b: b["steps"][1].update(ref="a b"), "steps.1.ref"),
        (lambda b: b["steps"][3].update(after=["left", "nowhere"]), "steps.3.after.1"),
        (lambda b: b["steps"][3].update(after=["left", "left"]), "steps.3.after.1"),
        (lambda b: b["steps"][0].update(after=["load"]), "steps.0.after.0"),
        (lambda b: b["steps"][2].update(after=["right"]), "steps.2.after.0"),
        (lambda b: b["steps"][1]["job"].update(max_attempts=0), "steps.1.job.max_attempts"),
        (lambda b: b["steps"][1]["job"].update(after=["1"]), "steps.1.job.after"),
        (lambda b: b["steps"][1].update(job=None), "steps.1.job"),
        (lambda b: b["steps"][1].update(after_policy="maybe"), "steps.1.after_policy"),
        (lambda b: b["steps"][1].update(colour="red"), "steps.1.colour"),
    ],
)
def test_post__bad__400_naming_the_step_nothing_created(api_client, change, field: str) -> None:
    body = diamond()
    change(body)
    r = post(api_client, "/workflows", body)
    assert r.status_code == 400, r.content
    assert field in r.json()["fields"], r.json()
    assert not Workflow.objects.exists() and not Task.objects.exists()


def test_post__cycle__400_naming_the_item_that_closes_it(api_client) -> None:
    body = diamond()
    body["steps"][0]["after"] = ["load"]
    r = post(api_client, "/workflows", body)
    assert r.json()["fields"] == {"steps.0.after.0": ["A cycle: extract → load → left → extract."]}


def test_post__1000_steps__one_call_every_edge_stored(api_client) -> None:
    steps = [{"ref": "root", "job": {"payload": 0, "queue": "big"}}]
    steps += [
        {"ref": f"s{i}", "job": {"payload": i, "queue": "big"}, "after": ["root"]}
        for i in range(998)
    ]
    steps.append({"ref": "merge", "job": {"payload": "m", "queue": "big"},
                  "after": [f"s{i}" for i in range(100)]})  # fmt: skip
    answer = submit(api_client, {"name": "fan", "steps": steps})
    assert len(answer["tasks"]) == 1000
    assert Task.objects.filter(workflow_id=answer["id"]).count() == 1000
    assert Dependency.objects.count() == 998 + 100
    assert api_client.get("/stats").json()["blocked"] == 999


def test_list__newest_first_filtered_by_state_and_name_paged(api_client) -> None:
    first = submit(api_client, diamond("a"))
    second = submit(api_client, {**diamond("b"), "name": "other"})
    third = submit(api_client, diamond("c"))
    api_client.delete(f"/workflows/{third['id']}")
    page = api_client.get("/workflows").json()
    assert [w["id"] for w in page["results"]] == [third["id"], second["id"], first["id"]]
    assert set(page["results"][0]) == {"id", "name", "state", "created_at", "updated_at", "counts"}
    assert page["results"][0]["counts"]["cancelled"] == 4
    running = api_client.get("/workflows", {"state": "running"}).json()["results"]
    assert [w["id"] for w in running] == [second["id"], first["id"]]
    assert [w["id"] for w in api_client.get("/workflows", {"state": "cancelled"}).json()[
        "results"]] == [third["id"]]  # fmt: skip
    named = api_client.get("/workflows", {"name": "other"}).json()["results"]
    assert [w["id"] for w in named] == [second["id"]]
    one = api_client.get("/workflows", {"limit": 1}).json()
    assert len(one["results"]) == 1 and one["next"]
    assert api_client.get(one["next"]).json()["results"][0]["id"] == second["id"]
    assert api_client.get("/workflows", {"state": "done"}).status_code == 400


def test_get__steps_of_one_key_in_an_ordered_queue__after_only_what_was_asked(api_client) -> None:
    # An ordered queue lines a key's steps up behind each other (key order, not `after`): the
    # workflow's steps still show the `after` they were submitted with, and nothing more.
    from broker import queues

    queues.update("in-line", {"ordered": True})
    job = {"payload": {}, "queue": "in-line", "key": "acct-1"}
    body = {"name": "postings", "steps": [{"ref": "a", "job": job}, {"ref": "b", "job": job}]}
    made = submit(api_client, body)
    got = api_client.get(f"/workflows/{made['id']}").json()
    assert {s["ref"]: s["after"] for s in got["steps"]} == {"a": [], "b": []}

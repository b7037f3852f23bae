"""List pages stay bounded whatever their tasks hold (API.md's Errors, "Bounded work"): parents
named without their results, each error cut to 1024 characters, and a page that stops adding
tasks once it passes 8 MiB, its `next` going on from its last task."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from broker import queue
from contract.limits import MAX_ANSWER_BYTES
from tests.conftest import post

pytestmark = pytest.mark.django_db

MB = 1_000_000


def _item_bytes(item: dict) -> int:
    """An item's size in the answer: its compact JSON and the comma after it."""
    return len(json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode()) + 1


def _done_parent(api_client: APIClient, result_bytes: int) -> str:
    task_id = post(api_client, "/jobs", {"payload": "parent", "queue": "parents"}).json()["id"]
    held = api_client.get("/jobs/next?wait_ms=0&queue=parents").json()
    r = post(
        api_client,
        f"/jobs/{task_id}/ack?lease_id={held['lease_id']}",
        {"result": "r" * result_bytes},
    )
    assert r.status_code == 204
    return task_id


def test_list__children_of_large_parents__parents_named_without_results(
    api_client: APIClient,
) -> None:
    parents = [_done_parent(api_client, 200_000) for _ in range(3)]
    for _ in range(10):
        post(api_client, "/jobs", {"payload": "child", "queue": "children", "after": parents})

    r = api_client.get("/jobs?queue=children&limit=10")

    results = r.json()["results"]
    assert len(results) == 10
    assert {json.dumps(t["parents"], sort_keys=True) for t in results} == {
        json.dumps({p: {"state": "done"} for p in parents}, sort_keys=True)
    }
    assert all(t["after"] == parents for t in results)
    assert len(r.content) < 100_000  # not the 6 MB of results, ten times over
    one = api_client.get(f"/jobs/{results[0]['id']}").json()  # one task: its parents whole
    assert one["parents"] == {p: {"state": "done", "result": "r" * 200_000} for p in parents}


@pytest.mark.parametrize("path", ["/jobs", "/dlq"])
def test_list__tasks_of_1_mb__page_stops_once_past_8_mib__next_goes_on_from_its_last(
    api_client: APIClient, enqueue_task: Callable[..., int], path: str
) -> None:
    made = [enqueue_task(payload="p" * MB, queue="big", max_attempts=1) for _ in range(20)]
    while path == "/dlq" and (held := queue.claim(["big"], 30_000, limit=20)):
        for got in held:  # claims of 9 at most: their answers stop past 8 MiB too
            queue.nack(got.task.pk, lease_id=got.lease_id, error="boom")

    seen: list[str] = []
    url = f"{path}?limit=500&queue=big"
    sizes = []
    while url:
        r = api_client.get(url)
        assert r.status_code == 200
        page = r.json()
        items = page["results"]
        sizes.append((len(r.content), len(items)))
        # Past 8 MiB with its last task, not before it: the task that took it past is the last.
        if page["next"] is not None:
            assert len(r.content) > MAX_ANSWER_BYTES
            assert len(r.content) - _item_bytes(items[-1]) <= MAX_ANSWER_BYTES
            assert page["next"].endswith(f"cursor={items[-1]['id']}")
        seen += [t["id"] for t in items]
        url = page["next"]

    assert sizes[0][1] == 9  # 9 MB: the ninth task is the one that takes it past 8 MiB
    assert seen == [str(pk) for pk in reversed(made)]  # each once, newest first, none skipped


def test_list__page_under_8_mib__whole_limit_and_next_as_usual(
    api_client: APIClient, enqueue_task: Callable[..., int]
) -> None:
    made = [enqueue_task(payload="p" * 100_000, queue="mid") for _ in range(30)]

    page = api_client.get("/jobs?limit=20&queue=mid").json()

    assert [t["id"] for t in page["results"]] == [str(pk) for pk in reversed(made[10:])]
    assert page["next"].endswith(f"cursor={made[10]}")


def test_list__one_task_over_8_mib__carried_alone(
    api_client: APIClient, enqueue_task: Callable[..., int]
) -> None:
    older = enqueue_task(payload="small", queue="huge")
    big = enqueue_task(payload="h" * (9 * MB), queue="huge")

    first = api_client.get("/jobs?queue=huge").json()
    second = api_client.get(first["next"]).json()

    assert [t["id"] for t in first["results"]] == [str(big)]
    assert [t["id"] for t in second["results"]] == [str(older)]
    assert second["next"] is None


def test_workflow__steps_with_long_errors__each_cut_to_1024_characters(
    api_client: APIClient,
) -> None:
    steps = [
        {"ref": f"s{i}", "job": {"payload": i, "queue": "wf", "max_attempts": 1}} for i in range(3)
    ]
    workflow = post(api_client, "/workflows", {"name": "errs", "steps": steps}).json()
    for i in range(3):
        held = api_client.get("/jobs/next?wait_ms=0&queue=wf").json()
        error = f"step {i} failed: " + "e" * 50_000 if i else "short"
        post(api_client, f"/jobs/{held['task']['id']}/nack?lease_id={held['lease_id']}",
             {"error": error})  # fmt: skip

    shown = api_client.get(f"/workflows/{workflow['id']}").json()

    errors = {s["ref"]: s["last_error"] for s in shown["steps"]}
    assert errors["s0"] == "short"
    assert errors["s1"] == ("step 1 failed: " + "e" * 50_000)[:1024]
    assert errors["s2"] == ("step 2 failed: " + "e" * 50_000)[:1024]

"""A claim of several stops adding deliveries once its answer passes 8 MiB (API.md's Errors,
"Bounded work"), and hands out none of the tasks it leaves out: they stay ready, their attempts
and the counters untouched, for the next claim."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from contract.limits import MAX_ANSWER_BYTES
from tests.api.conftest import Sqs
from tests.conftest import assert_invariant, post

pytestmark = pytest.mark.django_db

RESULT = 261_000  # the parents: ten results of 261 KB each per child, 2.6 MB a delivery


def _delivery_bytes(d: dict[str, Any]) -> int:
    return len(json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode()) + 1


def _children_of_large_parents(api_client: APIClient, n: int, queue: str) -> list[str]:
    parents = []
    for _ in range(10):
        made = post(api_client, "/jobs", {"payload": "parent", "queue": "parents"}).json()["id"]
        held = api_client.get("/jobs/next?wait_ms=0&queue=parents").json()
        r = post(
            api_client, f"/jobs/{made}/ack?lease_id={held['lease_id']}", {"result": "r" * RESULT}
        )
        assert r.status_code == 204
        parents.append(made)
    return [
        post(api_client, "/jobs", {"payload": i, "queue": queue, "after": parents}).json()["id"]
        for i in range(n)
    ]


def _claim(api_client: APIClient, queue: str, n: int) -> tuple[int, list[dict[str, Any]]]:
    r = post(api_client, "/jobs/claim", {"max": n, "wait_ms": 0, "queues": [queue]})
    if r.status_code == 204:
        return 0, []
    assert r.status_code == 200, r.content
    return len(r.content), r.json()["deliveries"]


@pytest.mark.parametrize(
    "settings",
    [{}, {"fair": True}, {"max_in_flight": 1000}, {"key_max_in_flight": 5}],
    ids=["plain", "fair", "max_in_flight", "key_max_in_flight"],
)
def test_claim_20__children_of_10_large_parents__stops_once_past_8_mib__rest_left_ready(
    api_client: APIClient, set_queue: Callable[..., dict[str, Any]], settings: dict[str, Any]
) -> None:
    if settings:
        set_queue("children", **settings)
    children = _children_of_large_parents(api_client, 20, "children")

    size, first = _claim(api_client, "children", 20)

    # Three deliveries are 7.8 MB: the fourth takes the answer past 8 MiB, and is the last.
    assert [d["task"]["id"] for d in first] == children[:4]
    assert size > MAX_ANSWER_BYTES
    assert size - _delivery_bytes(first[-1]) <= MAX_ANSWER_BYTES
    assert all(d["task"]["parents"][p]["result"] == "r" * RESULT for d in first
               for p in d["task"]["after"])  # fmt: skip
    # The sixteen left out were never handed out: ready, no attempt burnt, nothing counted.
    stats = api_client.get("/stats").json()
    assert (stats["handed_out"], stats["totals"]["delivered"]) == (4 + 0, 10 + 4)
    left = [api_client.get(f"/jobs/{pk}").json() for pk in children[4:]]
    assert {(t["state"], t["attempts"]) for t in left} == {("ready", 0)}
    assert_invariant()

    taken = [d["task"]["id"] for d in first]
    while (got := _claim(api_client, "children", 20)[1]) and len(taken) < 40:
        assert len(got) == 4 or len(taken) + len(got) == 20
        taken += [d["task"]["id"] for d in got]
    assert taken == children  # each once, in claim order
    stats = api_client.get("/stats").json()
    assert (stats["handed_out"], stats["totals"]["delivered"]) == (20, 10 + 20)


def test_claim_many__small_tasks__every_one_as_before(
    api_client: APIClient, put: Callable[..., list[str]]
) -> None:
    made = put("small", 100)

    _, got = _claim(api_client, "small", 100)

    assert [d["task"]["id"] for d in got] == made


def test_claim_many__first_task_alone_over_8_mib__carried_alone(
    api_client: APIClient, enqueue_task: Callable[..., int]
) -> None:
    big = enqueue_task(payload="h" * (9 * 1_000_000), queue="huge")
    small = enqueue_task(payload="s", queue="huge")

    _, first = _claim(api_client, "huge", 10)
    _, second = _claim(api_client, "huge", 10)

    assert [d["task"]["id"] for d in first] == [str(big)]
    assert [d["task"]["id"] for d in second] == [str(small)]


def test_claim_many__several_queues_then_every_queue__same_bound(
    api_client: APIClient, enqueue_task: Callable[..., int]
) -> None:
    made = [enqueue_task(payload="p" * 1_000_000, queue=f"q{i % 2}") for i in range(12)]

    got = post(api_client, "/jobs/claim", {"max": 12, "wait_ms": 0, "queues": ["q0", "q1"]})

    assert [d["task"]["id"] for d in got.json()["deliveries"]] == [str(pk) for pk in made[:9]]
    more = [enqueue_task(payload="p" * 1_000_000, queue="r") for _ in range(12)]
    got = post(api_client, "/jobs/claim", {"max": 12, "wait_ms": 0})
    assert [d["task"]["id"] for d in got.json()["deliveries"]] == [
        str(pk) for pk in made[9:] + more[:6]
    ]


def test_sqs_receive_10__messages_of_1_mb__stops_once_past_8_mib__rest_receivable(
    sqs: Sqs, queue_url: Callable[..., str]
) -> None:
    url = queue_url("large")
    for i in range(10):
        status, _, _ = sqs("SendMessage", {"QueueUrl": url, "MessageBody": f"{i}" * 1_000_000})
        assert status == 200

    status, first, response = sqs("ReceiveMessage", {"QueueUrl": url, "MaxNumberOfMessages": 10})

    messages = first["Messages"]
    assert [m["Body"][0] for m in messages] == [str(i) for i in range(9)]
    size = len(response.content)
    assert size > MAX_ANSWER_BYTES
    assert size - _delivery_bytes(messages[-1]) <= MAX_ANSWER_BYTES
    _, second, _ = sqs("ReceiveMessage", {"QueueUrl": url, "MaxNumberOfMessages": 10})
    assert [m["Body"][0] for m in second["Messages"]] == ["9"]

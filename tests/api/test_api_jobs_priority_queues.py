"""Claims take high, normal, then low priority, oldest first, named queues only; the plans."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from broker import queue
from broker.queue import sql
from broker.states import PRIORITY_NAMES
from tests.conftest import analyze_tasks, explain, post

pytestmark = pytest.mark.django_db

PRIORITIES = ["low", "normal", "high"]
RANK = {"high": 0, "normal": 1, "low": 2}


def enqueue_mixed(enqueue: Callable[..., str], n: int, seed: int) -> list[tuple[str, str]]:
    """n tasks of shuffled priorities, in creation order: [(id, priority)]."""
    rng = random.Random(seed)
    made = []
    for i in range(n):
        priority = rng.choice(PRIORITIES)
        made.append((enqueue(payload={"i": i}, priority=priority), priority))
    return made


def drain(
    claim: Callable[..., Any], claim_nothing: Callable[..., None], n: int
) -> list[tuple[str, str]]:
    """Claim n tasks one by one, then see the queue empty: [(id, priority)] in claim order."""
    got = [(d["task"]["id"], d["task"]["priority"]) for d in (claim() for _ in range(n))]
    claim_nothing()
    return got


def expected_order(made: list[tuple[str, str]]) -> list[tuple[str, str]]:
    # sorted() is stable: within one priority, creation (oldest first) order stays.
    return sorted(made, key=lambda item: RANK[item[1]])


def test_claim__priority_then_oldest_first(enqueue, claim, claim_nothing) -> None:
    made = enqueue_mixed(enqueue, 30, seed=1)
    assert drain(claim, claim_nothing, len(made)) == expected_order(made)


def test_claim__oldest_available_first_within_a_priority(enqueue, claim) -> None:
    first = enqueue(priority="low")
    high = enqueue(priority="high")
    second = enqueue(priority="low")
    assert [claim()["task"]["id"] for _ in range(3)] == [high, first, second]


def test_claim__priority_beats_age(api_client, enqueue, claim) -> None:
    old_low = enqueue(priority="low")
    new_normal = enqueue(priority="normal")
    assert claim()["task"]["id"] == new_normal
    assert claim()["task"]["id"] == old_low


def test_claim__batch_claim_in_priority_order(api_client, enqueue) -> None:
    made = enqueue_mixed(enqueue, 12, seed=2)
    r = post(api_client, "/jobs/claim", {"max": 100, "wait_ms": 0})
    assert r.status_code == 200
    got = [(d["task"]["id"], d["task"]["priority"]) for d in r.json()["deliveries"]]
    assert got == expected_order(made)


def test_queues__claim_takes_only_the_named_queues(enqueue, claim, claim_nothing) -> None:
    mail = enqueue(queue="emails")
    report = enqueue(queue="reports")
    other = enqueue(queue="other.v2")
    assert claim(queue="reports")["task"]["id"] == report
    claim_nothing(queue="reports")
    both = {claim(queue="emails,other.v2")["task"]["id"] for _ in range(2)}
    assert both == {mail, other}
    claim_nothing(queue="emails,other.v2")


def test_queues__priority_applies_within_the_queue(enqueue, claim) -> None:
    enqueue(queue="b", priority="high")
    low_a = enqueue(queue="a", priority="low")
    high_a = enqueue(queue="a", priority="high")
    assert [claim(queue="a")["task"]["id"] for _ in range(2)] == [high_a, low_a]


def test_queues__enqueue_default_queue_is_default(enqueue, claim, task) -> None:
    pk = enqueue()
    assert task(pk)["queue"] == "default"
    assert claim(queue="default")["task"]["id"] == pk


@pytest.mark.parametrize("bad", ["a b", "x" * 65, "é", "a/b"])
def test_queues__bad_name__400(api_client, bad: str) -> None:
    r = post(api_client, "/jobs", {"payload": 1, "queue": bad})
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["queue"]
    r = api_client.get("/jobs/next", {"queue": bad, "wait_ms": 0})
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["queue"]


@pytest.mark.parametrize("bad", ["urgent", "HIGH", 0, None])
def test_priority__unknown__400(api_client, bad: Any) -> None:
    r = post(api_client, "/jobs", {"payload": 1, "priority": bad})
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["priority"]


# -- PostgreSQL: the single-statement claim and its plan ----------------------------------------


@pytest.mark.postgres
def test_claim_pg__priority_then_oldest_first_single_and_batch(enqueue, claim) -> None:
    made = enqueue_mixed(enqueue, 40, seed=3)
    order = expected_order(made)
    singles = [claim() for _ in range(10)]
    assert [(d["task"]["id"], d["task"]["priority"]) for d in singles] == order[:10]
    batch = queue.claim(None, 30_000, limit=100)
    assert [(str(d.task.pk), PRIORITY_NAMES[d.task.priority]) for d in batch] == order[10:]


def _insert(state: str, n: int) -> None:
    """n tasks in `state` of mixed priorities and queues, in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO broker_task (state, queue, priority, payload, attempts, max_attempts,"
            " available_at, created_at, updated_at)"
            " SELECT %s, 'q' || (g %% 5), g %% 3, '{}', 1, 3, now(), now(), now()"
            " FROM generate_series(1, %s) g",
            [state, n],
        )


def _plan(statement: str, queues: list[str] | None) -> str:
    return explain(statement, queues=queues, queue=queues[0] if queues else None)


def _pick(plan: str) -> str:
    """The plan of the CTE that picks the rows (the rest updates and counts them)."""
    return plan.split("CTE picked")[1].split("CTE claimed")[0]


def assert_claim_index_only(plan: str, index: str = "task_claim_idx", ordered: bool = True) -> None:
    pick = _pick(plan)
    # One scan of one ready-only index serves every priority: no per-priority scans and no
    # walk over the finished rows; `ordered`: already in claim order, so no sort of the ready.
    # (The gate, the one-time read of the queue settings, is a scan of its own CTE.)
    assert pick.count(" on broker_task") == 1, plan
    assert f"Index Scan using {index} on broker_task" in pick, plan
    if ordered:
        assert "Sort" not in pick, plan


@pytest.mark.postgres
def test_claim_pg__many_done_rows__plan_uses_the_partial_claim_index(enqueue) -> None:
    _insert("done", 20_000)
    _insert("ready", 300)
    analyze_tasks()
    assert_claim_index_only(_plan(sql.CLAIM_ANY, None))


@pytest.mark.postgres
def test_claim_pg__burst_after_analyze__plan_still_uses_the_claim_index(enqueue) -> None:
    # What a long-lived broker sees: ANALYZE ran while nearly every row was done, then a burst
    # of ready tasks arrived (autovacuum re-analyzes only after 10 % of the table changed).
    # A plan that sorts every ready row would then cost each claim a full sort.
    _insert("done", 20_000)
    analyze_tasks()
    _insert("ready", 2_000)
    assert_claim_index_only(_plan(sql.CLAIM_ANY, None))


@pytest.mark.postgres
def test_claim_pg__one_queue_of_many__plan_reads_the_queue_claim_index_in_order(
    enqueue,
) -> None:
    _insert("done", 20_000)
    _insert("ready", 3_000)  # 600 ready in each of q0..q4
    analyze_tasks()
    # One queue with work in it: read in claim order straight from the per-queue index, with
    # no sort of that queue's ready rows. (For a queue of one or two ready rows the planner may
    # as well take the live-state index and sort them: either is one short scan.)
    plan = _plan(sql.CLAIM_ONE_QUEUE, ["q1"])
    assert_claim_index_only(plan, "task_claim_queue_idx")


@pytest.mark.postgres
def test_claim_pg__two_queues_beside_a_big_backlog__each_queue_read_by_its_index(enqueue) -> None:
    # Two empty queues asked for while 300k... here 3 000 ready wait in other queues: each asked
    # queue is one short range of the per-queue index, never a walk over the others' ready rows.
    _insert("done", 20_000)
    _insert("ready", 3_000)  # q0..q4
    analyze_tasks()
    plan = _plan(sql.CLAIM_QUEUES, ["empty_a", "empty_b"])
    pick = _pick(plan)
    assert "Index Scan using task_claim_queue_idx on broker_task" in pick, plan
    assert "Seq Scan on broker_task" not in pick, plan
    assert "task_claim_idx " not in pick, plan

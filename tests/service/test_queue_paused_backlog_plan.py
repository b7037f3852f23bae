"""A claim from every queue beside a paused queue's backlog at the head of the claim index: the
backlog is stepped over, never walked (the plans, read from PostgreSQL's EXPLAIN ANALYZE)."""

from __future__ import annotations

import pytest
from django.db import connection

from broker import queue, queues
from broker.queue import sql
from tests.conftest import analyze_tasks, explain

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

BACKLOG = 30_000


def _insert(state: str, n: int, queue_name: str, priority: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO broker_task (state, queue, priority, payload, attempts, max_attempts,"
            " available_at, created_at, updated_at)"
            " SELECT %s, %s, %s, '{}', 0, 3, now() - interval '1 hour', now(), now()"
            " FROM generate_series(1, %s)",
            [state, queue_name, priority, n],
        )


@pytest.fixture
def backlog() -> None:
    _insert("done", 10_000, "old", 1)
    # The paused queue's tasks are the oldest and of the highest priority: the first rows of
    # task_claim_idx, which a claim from every queue reads in order.
    _insert("ready", BACKLOG, "stuck", 0)
    for name in ("a", "b", "c"):
        _insert("ready", 100, name, 1)
    analyze_tasks()
    queues.update("stuck", {"paused": True})


def _pick(plan: str) -> str:
    return plan.split("CTE picked")[1].split("CTE claimed")[0]


def _rows_read(plan: str) -> int:
    """Rows the task scans of the plan handed up or filtered out, in all."""
    total = 0
    for line in plan.splitlines():
        if "Rows Removed by Filter" in line:
            total += int(line.rsplit(":", 1)[1])
        if " on broker_task" in line and "actual" in line and "never executed" not in line:
            rows = int(line.split("rows=")[1].split()[0])
            loops = int(line.split("loops=")[1].split(")")[0])
            total += rows * loops
    return total


def test_claim_every_queue__paused_backlog__the_one_statement_takes_nothing_reads_nothing(
    backlog: None,
) -> None:
    plan = explain(sql.CLAIM_ANY, "(ANALYZE, COSTS OFF)")
    pick = _pick(plan)
    assert "One-Time Filter" in pick, plan
    assert "never executed" in pick, plan
    assert _rows_read(pick) == 0, plan


def test_claim_every_queue__paused_backlog__restricted_path_steps_over_it(backlog: None) -> None:
    plan = explain(sql.CLAIM_ALLOWED_EVERY, "(ANALYZE, COSTS OFF)")
    pick = plan.split("CTE claimed")[0]  # the loose scan of names, and the pick
    assert "Seq Scan on broker_task" not in pick, plan
    assert "task_claim_idx " not in pick, plan
    # One probe per queue for the names, then each open queue's first rows: a few hundred rows
    # at most, never the 30 000 of the paused queue.
    assert _rows_read(pick) < 1_000, plan


def test_claim_every_queue__paused_backlog__hands_out_another_queue_in_order(
    backlog: None,
) -> None:
    got = queue.claim(None, 30_000, limit=5)
    assert [d.task.queue for d in got] == ["a"] * 5

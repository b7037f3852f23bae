"""A claim on queues with nothing ready, beside another queue's backlog: it reads the per-queue
index of its own queues, never the backlog (the plans, read from PostgreSQL's EXPLAIN ANALYZE)."""

from __future__ import annotations

import re

import pytest
from django.db import connection

from broker.queue import sql
from tests.conftest import explain
from tests.service.test_queue_paused_backlog_plan import _insert, _pick, _rows_read

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _backlog() -> None:
    # Two queue names in the statistics, most rows finished (as in `make bench`): PostgreSQL then
    # guessed that any queue holds half the ready rows, and walked task_claim_idx filtering by
    # queue (60,000 rows read for nothing; 300,000 and 127 ms a claim in the benchmark).
    _insert("done", 200_000, "old", 1)
    _insert("ready", 60_000, "busy", 1)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE broker_task")


def test_claims_beside_a_backlog__read_only_what_they_take() -> None:
    """One backlog (260,000 rows, 4 s to build) for the three claims' plans."""
    _backlog()

    # Two empty queues: nothing read.
    plan = explain(sql.CLAIM_QUEUES, "(ANALYZE, COSTS OFF)", queues=["empty_a", "empty_b"])
    pick = _pick(plan)
    assert "task_claim_queue_idx" in pick, plan
    assert _rows_read(pick) == 0, plan

    # The backlog's queue and an empty one: each queue's LATERAL reads at most `limit`.
    plan = explain(sql.CLAIM_QUEUES, "(ANALYZE, COSTS OFF)", queues=["busy", "empty"], limit=10)
    pick = _pick(plan)
    assert "task_claim_queue_idx" in pick, plan
    assert _rows_read(pick) <= 10 + 10, plan

    # A restricted scope with nothing ready (a fair queue's parked polls, an SQS receive, look
    # here first): nothing to lock or pick, an index probe a queue (which of the per-queue
    # indexes varies with the statistics).
    plan = explain(
        sql.RESTRICTED_IN, "(ANALYZE, COSTS OFF)", every=False, scope=["empty_a", "empty_b"]
    )
    assert re.search(r"Index (Only )?Scan using \w+ on broker_task", plan), plan
    assert _rows_read(plan) == 0, plan

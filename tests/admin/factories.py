"""Dead tasks for admin tests: through the state machine, or written straight in for bulk."""

from __future__ import annotations

import json
import time
from typing import Any

from django.utils import timezone

from broker import queue
from broker.models import Task
from broker.queue import NewTask
from broker.states import State


def make_dead(
    n: int = 1, *, error: str | None = "boom", queue_name: str = "default", payload: Any = None
) -> list[int]:
    """n tasks in `queue_name`, each claimed once and nacked with `error` (None: lease expiry)."""
    body = json.dumps(payload if payload is not None else {"n": 1})
    ids = queue.enqueue_many([NewTask(payload=body, max_attempts=1, queue=queue_name)] * n)
    lease_ms = 1 if error is None else 60_000
    claimed: list[int] = []
    while len(claimed) < n:
        got = queue.claim([queue_name], lease_ms, limit=min(1000, n - len(claimed)))
        assert got, "every task just enqueued should be claimable"
        claimed += [d.task.pk for d in got]
        if error is not None:
            for d in got:
                queue.nack(d.task.pk, lease_id=d.lease_id, error=error)
    assert sorted(claimed) == sorted(ids), "a task from an earlier step was claimed"
    if error is None:
        time.sleep(0.01)
        while queue.reclaim_expired(limit=1000):
            pass
    return ids


def insert_dead(n: int, error: str = "boom") -> list[int]:
    """n rows already dead, written straight in: a fixture for bulk actions, not a transition.

    The state machine's way (claim, then nack or lease expiry) costs milliseconds per task, so
    10,000 of them would take a minute; the requeue under test is the real one either way.
    """
    now = timezone.now()
    rows = [
        Task(
            state=State.DEAD, queue="default", payload='{"n": 1}', attempts=1, max_attempts=1,
            available_at=now, last_error=error, created_at=now, updated_at=now,
        )
        for _ in range(n)
    ]  # fmt: skip
    return [row.pk for row in Task.objects.bulk_create(rows, batch_size=1000)]

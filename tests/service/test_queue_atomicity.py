"""Each move is one transaction: when its counter (or history) write fails, the task stays put.

The failure is injected in the database (a trigger refusing writes to one table), so the test holds
whatever SQL a move uses; transaction=True so each move's own transaction is what rolls back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import DatabaseError, connection
from django.db.models import Model

from broker import queue
from broker.models import QueueCounter, Task, TaskError
from broker.queue import NewTask

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def refuse_writes() -> Iterator[Callable[[type], None]]:
    """refuse_writes(Model): from now on, every INSERT or UPDATE of that model's table fails."""
    triggers: list[tuple[str, str]] = []

    def arm(model: type) -> None:
        table = model._meta.db_table  # type: ignore[attr-defined]
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(
                    "CREATE OR REPLACE FUNCTION test_refuse_write() RETURNS trigger "
                    "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$"
                )
                name = f"test_refuse_{table}"
                cursor.execute(
                    f"CREATE TRIGGER {name} BEFORE INSERT OR UPDATE ON {table} "
                    "FOR EACH ROW EXECUTE FUNCTION test_refuse_write()"
                )
                triggers.append((name, table))
            else:
                for event in ("INSERT", "UPDATE"):
                    name = f"test_refuse_{table}_{event.lower()}"
                    cursor.execute(
                        f"CREATE TRIGGER {name} BEFORE {event} ON {table} "
                        "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
                    )
                    triggers.append((name, table))

    yield arm
    with connection.cursor() as cursor:
        for name, table in triggers:
            on = f" ON {table}" if connection.vendor == "postgresql" else ""
            cursor.execute(f"DROP TRIGGER IF EXISTS {name}{on}")


def snapshot() -> tuple[Any, ...]:
    rows = Task.objects.order_by("pk").values_list(
        "pk", "state", "attempts", "lease_id", "last_error", "available_at", "result"
    )
    return (list(rows), TaskError.objects.count(), queue.totals())


def _prepare(op: str) -> Callable[[], object]:
    """Bring a task to where `op` applies; return the call that makes the move."""
    if op == "enqueue":
        return lambda: queue.enqueue(NewTask(payload="1"))
    if op == "enqueue_many":
        return lambda: queue.enqueue_many([NewTask(payload="1"), NewTask(payload="2")])
    pk, _ = queue.enqueue(
        NewTask(payload="1", max_attempts=1 if op in ("nack_bury", "requeue") else 3)
    )
    if op == "claim":
        return lambda: queue.claim(None, 1000)
    if op == "cancel":
        return lambda: queue.cancel(pk)
    lease = queue.claim(None, 1 if op == "reclaim" else 60_000)[0].lease_id
    if op == "ack":
        return lambda: queue.ack(pk, lease_id=lease, result={"r": 1})
    if op in ("nack_retry", "nack_bury"):
        return lambda: queue.nack(pk, lease_id=lease, error="x")
    if op == "reclaim":
        time.sleep(0.01)  # the 1 ms lease expires
        return queue.reclaim_expired
    if op == "requeue":
        queue.nack(pk, lease_id=lease, error="x")
        return lambda: queue.requeue(pk)
    raise AssertionError(op)


COUNTED_MOVES = [
    "enqueue",
    "enqueue_many",
    "claim",
    "ack",
    "nack_retry",
    "nack_bury",
    "reclaim",
    "cancel",
    "requeue",
]
FAILING_MOVES = ["nack_retry", "nack_bury", "reclaim"]
WRITES = [
    *[pytest.param(op, QueueCounter, id=f"{op}-counter_write") for op in COUNTED_MOVES],
    *[pytest.param(op, TaskError, id=f"{op}-error_history_write") for op in FAILING_MOVES],
]


@pytest.mark.parametrize(("op", "refused"), WRITES)
def test_move__a_write_fails__task_and_counters_unchanged(
    op: str, refused: type[Model], refuse_writes
) -> None:
    move = _prepare(op)
    before = snapshot()
    refuse_writes(refused)
    with pytest.raises(DatabaseError):
        move()
    assert snapshot() == before

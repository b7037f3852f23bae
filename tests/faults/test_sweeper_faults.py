"""kill -9 of a sweeper in the middle of a batch, and two sweepers at once: no task moves twice."""

from __future__ import annotations

import logging
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection, transaction

from broker import queue
from broker.models import Task, TaskError
from broker.queue import NewTask
from broker.states import State
from tests.faults.harness import LEASE_EXPIRED
from tests.procs import Proc, running, sweeper, wait_until

# serial: it freezes a sweeper mid-batch by timing (SIGSTOP), which a loaded machine upsets
pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow, pytest.mark.serial]
log = logging.getLogger(__name__)

N = 6000
LEASE_MS = 1000


def _sweeper(db_url: str, tmp: Path, name: str) -> Proc:
    # PGAPPNAME names the sweeper's database session, so the test can see it in pg_stat_activity.
    return sweeper(db_url, tmp, name, 20, PGAPPNAME=name)


def _in_transaction(name: str) -> bool:
    """Whether a database session of process `name` is inside a transaction, between statements.

    Any of its sessions (its connection pool keeps more than one open), in this test's database.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = %s AND state = 'idle in transaction'"
            " AND datname = current_database()",  # not another test run's sweeper of that name
            [name],
        )
        return cursor.fetchone()[0] > 0


def _hand_out_all(lease_ms: int) -> None:
    while queue.claim(None, lease_ms, limit=100):
        pass


def _reclaimed() -> int:
    return queue.totals()["reclaimed"]


def _locked_elsewhere() -> int:
    """How many handed-out tasks some other transaction holds locked right now."""
    with transaction.atomic():
        handed_out = Task.objects.filter(state=State.HANDED_OUT)
        every = set(handed_out.values_list("pk", flat=True))
        free = set(handed_out.select_for_update(skip_locked=True).values_list("pk", flat=True))
        transaction.set_rollback(True)  # let go of the rows this look locked
    return len(every - free)


def _stop_inside_a_batch(proc: Proc, name: str, tries: int = 200) -> int:
    """SIGSTOP the sweeper until it is caught inside a reclaim batch; how many rows it locks."""
    for _ in range(tries):
        proc.send(signal.SIGSTOP)
        time.sleep(0.05)  # a statement already sent finishes; the transaction stays open
        if _in_transaction(name) and (locked := _locked_elsewhere()):
            return locked
        proc.send(signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError("never caught the sweeper inside a reclaim batch")


def _errors_by_task() -> dict[int, list[int]]:
    by_task: dict[int, list[int]] = {}
    for task_id, attempt in (
        TaskError.objects.filter(error=LEASE_EXPIRED)
        .order_by("id")
        .values_list("task_id", "attempt")
    ):
        by_task.setdefault(task_id, []).append(attempt)
    return by_task


def test_sweeper_kill_9_mid_batch_then_two_sweepers__every_lease_reclaimed_once(
    db_url: str, tmp_path: Path
) -> None:
    queue.enqueue_many([NewTask(payload="{}", max_attempts=3) for _ in range(N)])
    _hand_out_all(LEASE_MS)
    time.sleep(LEASE_MS / 1000)

    # Round 1: sweeper A is frozen inside a reclaim batch, B sweeps around A's locked rows,
    # then A is killed (its transaction rolls back) and B reclaims the rest.
    doomed = _sweeper(db_url, tmp_path, "sweeper-a")
    with running(doomed):
        wait_until(lambda: _reclaimed() > 0, 30, 0.01, "sweeper A's first batch")
        locked = _stop_inside_a_batch(doomed, "sweeper-a")
        frozen_at = _reclaimed()
        with running(_sweeper(db_url, tmp_path, "sweeper-b")):
            # B reclaims everything but A's locked batch, and does not wait for it.
            wait_until(lambda: _reclaimed() == N - locked, 30, 0.05, "sweeper B to reclaim")
            time.sleep(1.0)
            assert _reclaimed() == N - locked, "B moved rows that A held locked"
            doomed.kill_group(signal.SIGKILL)
            wait_until(lambda: _reclaimed() == N, 30, 0.05, "the rest after A's death")
            time.sleep(0.5)
            assert _reclaimed() == N

            errors = _errors_by_task()
            assert len(errors) == N and all(e == [1] for e in errors.values())
            totals = queue.totals()
            assert (totals["retried"], totals["buried"]) == (N, 0)

            # Round 2: two sweepers at once, one of them killed and restarted while working.
            with running(_sweeper(db_url, tmp_path, "sweeper-c")) as third:
                wait_until(lambda: queue.gauges()[0]["ready"] == N, 30, 0.1, "all promoted")
                _hand_out_all(LEASE_MS)
                wait_until(lambda: _reclaimed() > N, 30, 0.01, "the second round to start")
                third.kill_group(signal.SIGKILL)
                with running(_sweeper(db_url, tmp_path, "sweeper-d")):
                    wait_until(lambda: _reclaimed() == 2 * N, 60, 0.05, "the second round")
                    time.sleep(0.5)

    errors = _errors_by_task()
    assert Counter(tuple(e) for e in errors.values()) == {(1, 2): N}  # once per expiry, in order
    totals = queue.totals()
    assert (totals["reclaimed"], totals["retried"], totals["buried"]) == (2 * N, 2 * N, 0)
    overall, _ = queue.gauges()
    assert overall[State.HANDED_OUT] == 0
    assert overall[State.READY] + overall[State.DELAYED] == N
    log.info(f"A frozen holding {locked} rows, {frozen_at} of {N} reclaimed by then")

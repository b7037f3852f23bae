"""However many schedules fire at once, a running sweeper still reclaims expired leases and
promotes delayed tasks within a couple of its ticks (API.md "Schedules"): 1500 schedules of
`every_s: 1`, all due, beside a lease of 300 ms and a delay of 300 ms."""

from __future__ import annotations

import threading
import time

import pytest

from broker import queue
from broker.models import Schedule, Task
from broker.queue import NewTask
from broker.queue.base import current_time
from broker.sweeper import OutageWatch
from tests.concurrency.conftest import in_thread

pytestmark = pytest.mark.django_db(transaction=True)

TICK_S = 0.05  # the sweeper's interval in tests
FLOOD = 1500


def _flood() -> None:
    now = current_time()
    Schedule.objects.bulk_create(
        Schedule(name=f"flood-{i}", every_s=1, job='{"payload": 1, "queue": "flood"}',
                 anchored_at=now, created_at=now, next_run_at=now)
        for i in range(FLOOD)
    )  # fmt: skip


def _state_after(pk: int, state: str, limit_s: float) -> float:
    """Seconds until task `pk` leaves `state` (limit_s when it has not by then)."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if Task.objects.filter(pk=pk).values_list("state", flat=True).get() != state:
            return time.monotonic() - started
        time.sleep(0.01)
    return limit_s


# A sweeper's thread beside the test's: SQLite's test database (shared-cache) locks them out.
@pytest.mark.postgres
def test_running_sweeper__1500_schedules_firing__lease_reclaimed_and_delay_ended_in_ticks() -> None:
    _flood()
    leased, _ = queue.enqueue(NewTask(payload="1", queue="work"))
    (held,) = queue.claim(["work"], lease_ms=300)
    delayed, _ = queue.enqueue(NewTask(payload="2", queue="work", delay_ms=300))
    stop = threading.Event()
    sweeps: list[float] = []
    errors: list[BaseException] = []

    def run() -> None:
        watch = OutageWatch(TICK_S)
        while not stop.is_set():
            started = time.monotonic()
            watch.sweep()
            sweeps.append(time.monotonic() - started)
            stop.wait(TICK_S)

    sweeper = in_thread(run, errors)
    try:
        time.sleep(0.3)  # the lease and the delay run out while the flood fires
        reclaimed_after = _state_after(held.task.pk, "handed_out", 10)
        promoted_after = _state_after(delayed, "delayed", 10)
    finally:
        stop.set()
        sweeper.join(60)

    assert not errors, errors
    assert Task.objects.filter(queue="flood").exists()  # the flood did fire meanwhile
    # A sweep fires for 0.1 s and one batch at most, then the next one's reclaims come: a couple
    # of ticks, with room for a busy host. Before, the first sweep fired for ever.
    assert reclaimed_after < 2.0, (reclaimed_after, max(sweeps, default=None))
    assert promoted_after < 2.0, (promoted_after, max(sweeps, default=None))
    assert Task.objects.get(pk=leased).state in ("delayed", "ready")
    assert sweeps and max(sweeps) < 1.5, sweeps


def test_sweep_once__flood_due__fires_each_due_schedule_once_at_most() -> None:
    _flood()
    from broker.sweeper import sweep_once

    fired = sweep_once(housekeeping=False, fire_for_s=None).fired

    # All those due when it began, each once, though the first fired are due again meanwhile.
    assert fired == FLOOD
    assert Task.objects.filter(queue="flood").count() == FLOOD
    tasks = Schedule.objects.values_list("last_task_id", flat=True)
    assert len(set(tasks)) == FLOOD and None not in tasks

"""kill -9 of random worker processes every few seconds under load."""

from __future__ import annotations

import logging
import random
import signal
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from broker.states import State
from tests.faults.harness import Broker, Producers, audit, settled, workers
from tests.procs import Proc, running, sweeper, wait_until

# Kills under load, long: make test-slow runs them.
pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]
log = logging.getLogger(__name__)


def test_worker_kill_9_every_2s_under_load__every_task_done_or_dead_within_attempts(
    db_url: str, tmp_path: Path, log_file: Path
) -> None:
    rng = random.Random()
    seed = rng.randrange(10**6)
    rng.seed(seed)
    broker = Broker(db_url, tmp_path)
    broker.start()
    args = ("--concurrency", "2", "--lease-ms", "2000")
    killed = 0
    with ExitStack() as stack:
        stack.callback(broker.stop)
        stack.enter_context(running(sweeper(db_url, tmp_path)))
        pool: list[Proc] = workers(broker.base, db_url, tmp_path, log_file, 3, *args)
        stack.callback(lambda: [proc.stop() for proc in pool])
        producers = Producers(
            broker.base,
            threads=10,
            per_thread=50,
            pause_s=0.2,
            fail_every=10,
            body={"max_attempts": 3},
        ).start()
        end = time.monotonic() + 15
        while time.monotonic() < end:
            time.sleep(rng.uniform(1.5, 2.5))
            victim = pool.pop(rng.randrange(len(pool)))
            victim.kill_group(signal.SIGKILL)
            victim.stop()
            killed += 1
            pool += workers(broker.base, db_url, tmp_path, log_file, 1, *args, first=killed + 2)
        producers.join(60)
        assert len(producers.accepted) == producers.wanted
        wait_until(settled, 60, 0.25, "every task to settle")

    tasks = audit(producers.accepted, log_file)
    assert {state for state, _, _ in tasks.values()} <= {State.DONE, State.DEAD}
    failing = {int(producers.accepted[key]) for key in producers.failing}
    assert len(failing) == producers.wanted // 10
    for pk, (state, attempts, _) in tasks.items():
        if pk in failing:
            assert (state, attempts) == (State.DEAD, 3), pk
    expired = sum(1 for *_, e in tasks.values() if e)
    done = sum(1 for s, _, _ in tasks.values() if s == State.DONE)
    log.info(
        f"seed {seed}: {killed} workers killed; {done} done, {len(tasks) - done} dead; "
        f"{expired} tasks redelivered after a lease expired"
    )

"""kill -9 of the whole broker (gunicorn master and workers) under load, then a restart."""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from broker.states import State
from tests.faults.harness import Broker, Producers, audit, settled, workers
from tests.procs import running, sweeper, wait_until

# Kills under load, long: make test-slow runs them.
pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]
log = logging.getLogger(__name__)


def test_broker_kill_9__50_producers_3_workers__every_accepted_task_done_once(
    db_url: str, tmp_path: Path, log_file: Path
) -> None:
    broker = Broker(db_url, tmp_path)
    broker.start()
    with ExitStack() as stack:
        stack.callback(broker.stop)
        stack.enter_context(running(sweeper(db_url, tmp_path)))
        for proc in workers(
            broker.base, db_url, tmp_path, log_file, 3, "--concurrency", "1", "--lease-ms", "5000"
        ):
            stack.enter_context(running(proc))
        producers = Producers(
            broker.base, threads=50, per_thread=8, pause_s=0.05, body={"max_attempts": 5}
        ).start()
        outages = []
        for mark in (100, 250):  # twice: the restarted broker must survive it as well
            wait_until(lambda m=mark: len(producers.accepted) >= m, 30, what=f"{mark} accepted")
            broker.kill9()
            down_at = time.monotonic()
            time.sleep(1.0)  # producers and workers now find nobody listening
            broker.start()
            outages.append(round(time.monotonic() - down_at, 1))

        producers.join(90)
        assert len(producers.accepted) == producers.wanted  # each retried until taken
        assert producers.errors > 0, "no producer noticed the outage"
        assert set(producers.statuses) <= {200, 201}, producers.statuses
        wait_until(settled, 60, 0.25, "every task to settle")

    tasks = audit(producers.accepted, log_file)
    assert {state for state, _, _ in tasks.values()} == {State.DONE}, "none stuck, none dead"
    log.info(
        f"outages {outages} s; answers {dict(producers.statuses)}; "
        f"send errors {producers.errors}; "
        f"redelivered after lease expiry {sum(1 for *_, e in tasks.values() if e)}"
    )

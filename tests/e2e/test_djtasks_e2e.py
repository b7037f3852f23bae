"""@task functions enqueued here run in a real runworker (through gunicorn), results read back.

Only the framework's public API is used to enqueue and to look at results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from django_tasks import TaskResult, TaskResultStatus

from tests import not_allowed_tasks, sample_tasks
from tests.procs import Proc, gunicorn, manage, sweeping, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

ALLOWED = "tests.sample_tasks.*"
FINISHED = {TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED}

StartWorker = Callable[..., Proc]


@pytest.fixture(scope="module")
def broker_url(live_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One broker and sweeper for the module: each test's workers and tasks are its own, and
    its teardown empties the tables."""
    tmp = tmp_path_factory.mktemp("djtasks")
    with (
        gunicorn(live_db_url, tmp, WORKERS="1") as base,
        sweeping(live_db_url, tmp, 50),
    ):
        yield base


@pytest.fixture
def start_worker(broker_url: str, db_url: str, tmp_path: Path) -> Iterator[StartWorker]:
    procs: list[Proc] = []

    def start(*args: str, name: str = "worker") -> Proc:
        proc = manage(
            ["runworker", "--broker", broker_url, "--wait-ms", "2000", *args],
            db_url,
            tmp_path,
            name,
            BROKER_TASKS_ALLOWED=ALLOWED,
            LOG_LEVEL="INFO",
        )
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            proc.stop()


def _finished(result: TaskResult, timeout: float = 20) -> TaskResult:
    def done() -> TaskResult | None:
        result.refresh()
        return result if result.status in FINISHED else None

    return wait_until(done, timeout, 0.05, f"task {result.id} to finish")


def test_task__runs_in_runworker__successful_with_return_value(start_worker: StartWorker) -> None:
    start_worker()
    added = sample_tasks.add.enqueue(2, 3)
    echoed = sample_tasks.echo.enqueue("a", [1, None], k={"nested": True})

    assert _finished(added).status == TaskResultStatus.SUCCESSFUL
    assert added.return_value == 5
    assert added.attempts == 1
    assert added.started_at is not None and added.finished_at >= added.started_at
    got = sample_tasks.echo.get_result(echoed.id)
    expected = {"args": ["a", [1, None]], "kwargs": {"k": {"nested": True}}}
    assert _finished(got).return_value == expected


def test_task__async_function__runs_and_returns(start_worker: StartWorker) -> None:
    start_worker()
    result = sample_tasks.double_async.enqueue(21)

    assert _finished(result).return_value == 42


def test_task__raises__failed_with_exception_class_and_traceback(start_worker: StartWorker) -> None:
    start_worker()
    result = sample_tasks.fail.enqueue("boom 42")

    assert _finished(result).status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value
    [error] = result.errors
    assert error.exception_class is ValueError
    assert "ValueError: boom 42" in error.traceback
    assert "sample_tasks.py" in error.traceback  # the raise site, not just the message


def test_task__returns_non_json__failed_not_stuck(start_worker: StartWorker) -> None:
    start_worker()
    result = sample_tasks.not_json.enqueue()

    assert _finished(result).status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError


def test_task__outside_the_allow_list__failed_never_run(start_worker: StartWorker) -> None:
    start_worker()
    result = not_allowed_tasks.forbidden.enqueue()

    assert _finished(result).status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "broker.tasks_backend.TaskNotAllowedError"
    assert "not in this worker's allow-list" in error.traceback


def test_task__priority__higher_runs_first(start_worker: StartWorker) -> None:
    # Enqueued lowest first while no worker runs; one worker thread then takes them in turn.
    # One claim per task: started_at is the claim time, which one prefetching claim shares.
    low = sample_tasks.add.using(priority=-20).enqueue(0, 1)
    normal = sample_tasks.add.enqueue(0, 2)
    high = sample_tasks.add.using(priority=20).enqueue(0, 3)
    start_worker("--concurrency", "1", "--prefetch", "0")

    for result in (low, normal, high):
        assert _finished(result).status == TaskResultStatus.SUCCESSFUL
    assert high.started_at < normal.started_at < low.started_at


def test_task__queue_name__only_a_worker_of_that_queue_runs_it(start_worker: StartWorker) -> None:
    other = sample_tasks.on_other_queue.enqueue(4)
    start_worker("--queue", "default")
    marker = sample_tasks.add.enqueue(1, 1)

    assert _finished(marker).status == TaskResultStatus.SUCCESSFUL
    other.refresh()
    assert other.status == TaskResultStatus.READY
    start_worker("--queue", "djt-other", name="other-worker")
    assert _finished(other).return_value == 40


def test_task__run_after__not_started_before_then(start_worker: StartWorker) -> None:
    start_worker()
    run_after = timezone.now() + timedelta(seconds=5)  # past the marker on a slow start
    result = sample_tasks.add.using(run_after=run_after).enqueue(5, 5)
    marker = sample_tasks.add.enqueue(1, 1)

    assert _finished(marker).status == TaskResultStatus.SUCCESSFUL
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert _finished(result).return_value == 10
    assert result.started_at >= run_after

"""The django.tasks API on the broker, before any worker runs: enqueue, get_result, validation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone
from django_tasks import TaskResultStatus, default_task_backend
from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist, TaskResultMismatch
from rest_framework.test import APIClient

from broker.models import Task
from tests import sample_tasks

pytestmark = pytest.mark.django_db(transaction=True)


class RollbackError(Exception):
    """Raised inside atomic() to roll it back."""


def test_enqueue__ready_result_with_args_and_backend() -> None:
    result = sample_tasks.echo.enqueue(1, "two", three=[3])

    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs, result.backend) == ([1, "two"], {"three": [3]}, "default")
    assert not result.is_finished
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value


def test_get_result__fresh_enqueue__same_task_args_and_status() -> None:
    result = sample_tasks.add.enqueue(2, 3)

    fetched = sample_tasks.add.get_result(result.id)

    assert fetched.id == result.id
    assert fetched.task.func is sample_tasks.add.func
    assert fetched.status == TaskResultStatus.READY
    assert (fetched.args, fetched.kwargs) == ([2, 3], {})
    assert fetched.enqueued_at is not None and fetched.started_at is None
    assert fetched.errors == [] and fetched.attempts == 0


def test_get_result__task_options_come_back() -> None:
    later = timezone.now() + timedelta(hours=1)
    result = sample_tasks.add.using(priority=42, run_after=later).enqueue(1, 1)

    fetched = default_task_backend.get_result(result.id)

    assert fetched.task.priority == 42
    assert fetched.task.run_after == later
    assert Task.objects.get(pk=int(result.id)).available_at == later  # due at it, not after
    assert fetched.task.queue_name == "default"
    assert fetched.status == TaskResultStatus.READY  # delayed is still waiting to run


def test_get_result__other_task_function__mismatch() -> None:
    result = sample_tasks.add.enqueue(2, 3)

    with pytest.raises(TaskResultMismatch):
        sample_tasks.fail.get_result(result.id)


@pytest.mark.parametrize("result_id", ["999999", "abc", "", "-1", "1" * 40])
def test_get_result__unknown_id__does_not_exist(result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result_id)


def test_get_result__plain_broker_task__does_not_exist() -> None:
    import broker

    task_id = broker.enqueue({"not": "a django task"})

    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(task_id)


def test_enqueue__in_rolled_back_transaction__result_does_not_exist() -> None:
    with pytest.raises(RollbackError), transaction.atomic():
        result = sample_tasks.add.enqueue(2, 3)
        assert sample_tasks.add.get_result(result.id).status == TaskResultStatus.READY
        raise RollbackError

    with pytest.raises(TaskResultDoesNotExist):
        sample_tasks.add.get_result(result.id)


def test_enqueue__in_committed_transaction__result_exists() -> None:
    with transaction.atomic():
        result = sample_tasks.add.enqueue(2, 3)

    assert sample_tasks.add.get_result(result.id).status == TaskResultStatus.READY


def test_using__queue_name_the_broker_refuses__invalid_task() -> None:
    with pytest.raises(InvalidTaskError, match="queue_name"):
        sample_tasks.add.using(queue_name="has space")


def test_using__run_after_beyond_7_days__invalid_task() -> None:
    with pytest.raises(InvalidTaskError, match="7 days"):
        sample_tasks.add.using(run_after=timezone.now() + timedelta(days=8))


def test_enqueue__args_not_json__refused() -> None:
    with pytest.raises(TypeError):
        sample_tasks.echo.enqueue({1, 2})
    with pytest.raises(InvalidTaskError, match="JSON"):
        sample_tasks.echo.enqueue(float("nan"))


def test_task__takes_context__refused_at_definition() -> None:
    from django_tasks import task

    def with_context(context: object) -> None: ...

    with_context.__qualname__ = "with_context"  # module-level in the framework's eyes
    with pytest.raises(InvalidTaskError, match="takes_context"):
        task(takes_context=True)(with_context)


def test_options_max_attempts__the_broker_task_gets_them(api_client: APIClient) -> None:
    backend = {"BACKEND": "broker.tasks_backend.BrokerBackend", "OPTIONS": {"MAX_ATTEMPTS": 4}}
    with override_settings(TASKS={"default": backend}):
        result = sample_tasks.add.enqueue(1, 2)

    task = api_client.get(f"/jobs/{result.id}").json()
    assert (task["type"], task["max_attempts"]) == ("django_task", 4)
    assert task["payload"]["path"] == "tests.sample_tasks.add"


def test_default_max_attempts__one_like_the_framework(api_client: APIClient) -> None:
    result = sample_tasks.add.enqueue(1, 2)

    assert api_client.get(f"/jobs/{result.id}").json()["max_attempts"] == 1


@pytest.mark.parametrize(
    ("priority", "broker_priority"),
    [(100, "high"), (1, "high"), (0, "normal"), (-1, "low"), (-100, "low")],
)
def test_priority__mapped_by_sign_to_the_broker_priority(
    api_client: APIClient, priority: int, broker_priority: str
) -> None:
    result = sample_tasks.add.using(priority=priority).enqueue(1, 2)

    assert api_client.get(f"/jobs/{result.id}").json()["priority"] == broker_priority


def test_post_jobs__django_task_type_bad_path__400_naming_it(api_client: APIClient) -> None:
    body = {"type": "django_task", "payload": {"path": "os.system; rm", "args": []}}

    response = api_client.post("/jobs", body, format="json")

    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["payload.path"]


def test_post_jobs__django_task_over_http__readable_as_a_result(api_client: APIClient) -> None:
    body = {
        "type": "django_task",
        "payload": {"path": "tests.sample_tasks.add", "args": [4, 5]},
    }

    response = api_client.post("/jobs", body, format="json")

    assert response.status_code == 201
    result = sample_tasks.add.get_result(response.json()["id"])
    assert (result.status, result.args) == (TaskResultStatus.READY, [4, 5])


def test_get_result__claimed_by_a_worker__running_with_its_id(api_client: APIClient) -> None:
    result = sample_tasks.add.enqueue(1, 2)
    claimed = api_client.get("/jobs/next?wait_ms=0", HTTP_X_BROKER_WORKER="host-7:pid-1")
    assert claimed.json()["task"]["id"] == result.id

    result.refresh()

    assert result.status == TaskResultStatus.RUNNING
    assert result.worker_ids == ["host-7:pid-1"]
    assert result.started_at is not None and result.finished_at is None


def test_get_result__cancelled_in_the_broker__failed_with_cancelled_error(
    api_client: APIClient,
) -> None:
    from broker.tasks_backend import TaskCancelledError

    result = sample_tasks.add.enqueue(1, 2)
    assert api_client.delete(f"/jobs/{result.id}").status_code == 204

    result.refresh()

    assert result.status == TaskResultStatus.FAILED
    assert result.errors[-1].exception_class is TaskCancelledError
    assert result.finished_at is not None

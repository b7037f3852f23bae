"""The worker's half of django.tasks on the broker: import an allowed @task by its dotted path."""

from __future__ import annotations

from django.utils.module_loading import import_string
from django_tasks.base import Task

from contract.djtasks import TaskNotAllowedError, is_allowed


def load_task(path: str) -> Task:
    """The @task object at `path`; TaskNotAllowedError unless allowed and really a Task."""
    if not is_allowed(path):
        raise TaskNotAllowedError(
            f"{path} is not in this worker's allow-list (BROKER_TASKS_ALLOWED or the TASKS "
            "backend's OPTIONS['ALLOWED_TASKS']); a retry fails the same way unless a worker "
            "that allows it claims the task"
        )
    found = import_string(path)
    if not isinstance(found, Task):
        raise TaskNotAllowedError(f"{path} is not a @task function")
    return found

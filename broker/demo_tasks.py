"""A @task to try the django.tasks backend with: `manage.py submit --type django_task` runs it."""

from __future__ import annotations

from django_tasks import task


@task
def add(a: int, b: int) -> int:
    """a + b, computed by whichever runworker claims it."""
    return a + b

"""A @task outside the workers' allow-list in the django.tasks tests."""

from __future__ import annotations

from django_tasks import task


@task
def forbidden() -> str:
    return "should never run"

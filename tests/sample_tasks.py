"""@task functions for the django.tasks backend tests; runworker imports them by dotted path."""

from __future__ import annotations

from typing import Any

from django_tasks import task


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task
def fail(message: str) -> None:
    raise ValueError(message)


@task
def not_json() -> Any:
    return {1, 2}


@task(queue_name="djt-other")
def on_other_queue(n: int) -> int:
    return n * 10


@task
async def double_async(n: int) -> int:
    return n * 2

"""GET /jobs, /dlq and /jobs/{id} answer a bounded size however long a task's error history is:
the newest errors, each text cut with a marker, and how many there are in all."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from broker import queue
from broker.models import Task, TaskError

pytestmark = pytest.mark.django_db

KIB = 1024


def _fail(pk: int, error: str) -> None:
    """One delivery of task `pk` that ends in a nack with `error` (a retry or the DLQ)."""
    Task.objects.filter(pk=pk, state="delayed").update(available_at=timezone.now())
    queue.promote_delayed()
    (held,) = queue.claim(None, 30_000)
    assert held.task.pk == pk
    queue.nack(pk, lease_id=held.lease_id, error=error)


def _history(pk: int, n: int, size: int) -> None:
    """`n` earlier attempts' errors of `size` characters each, as kept across requeues (written
    straight in: a fixture of old history, not transitions under test)."""
    start = timezone.now() - timedelta(hours=1)
    TaskError.objects.bulk_create(
        TaskError(task_id=pk, attempt=i % 100 + 1, at=start + timedelta(seconds=i),
                  error=f"old error {i:03} " + "x" * (size - 14))
        for i in range(n)
    )  # fmt: skip


def _dead_with_errors(enqueue_task: Callable[..., int], *, old: int, size: int) -> int:
    pk = enqueue_task(max_attempts=1)
    _history(pk, old, size)
    _fail(pk, "final: " + "y" * (size - 7))
    return pk


def test_list__long_history__newest_5_errors_cut_to_1024_chars_with_count(
    api_client: APIClient, enqueue_task: Callable[..., int]
) -> None:
    pk = _dead_with_errors(enqueue_task, old=6, size=5000)

    for path in ("/jobs", "/dlq"):
        (shown,) = api_client.get(path).json()["results"]

        assert shown["error_count"] == 7
        errors = shown["errors"]
        assert [e["error"][:13] for e in errors] == [
            "old error 002", "old error 003", "old error 004", "old error 005", "final: yyyyyy",
        ]  # fmt: skip
        assert {len(e["error"]) for e in errors} == {1024}
        assert all(e["truncated"] is True and e["length"] == 5000 for e in errors)
        assert shown["last_error"] == ("final: " + "y" * 4993)[:1024]
        assert shown["last_error_truncated"] is True
    assert pk


def test_one_task__150_errors__newest_100_cut_to_16_kib(
    api_client: APIClient, enqueue_task: Callable[..., int]
) -> None:
    pk = _dead_with_errors(enqueue_task, old=149, size=20_000)

    shown = api_client.get(f"/jobs/{pk}").json()

    assert shown["error_count"] == 150
    assert len(shown["errors"]) == 100
    assert shown["errors"][0]["error"].startswith("old error 050 ")
    assert shown["errors"][-1]["error"].startswith("final: ")
    assert {len(e["error"]) for e in shown["errors"]} == {16 * KIB}
    assert {e["length"] for e in shown["errors"]} == {20_000}
    assert len(shown["last_error"]) == 16 * KIB and shown["last_error_truncated"] is True


def test_one_task__short_errors__whole_and_not_marked(
    api_client: APIClient, enqueue_task: Callable[..., int]
) -> None:
    pk = enqueue_task(max_attempts=2)
    _fail(pk, "timeout")
    _fail(pk, "refused: " + "z" * 1015)  # exactly 1024: shown whole in lists too

    for body in (
        api_client.get(f"/jobs/{pk}").json(),
        api_client.get("/jobs").json()["results"][0],
    ):
        assert [(e["attempt"], e["error"], e["truncated"]) for e in body["errors"]] == [
            (1, "timeout", False), (2, "refused: " + "z" * 1015, False),
        ]  # fmt: skip
        assert all("length" not in e for e in body["errors"])
        assert (body["error_count"], body["last_error_truncated"]) == (2, False)


def test_one_task__no_errors__empty_and_not_marked(
    api_client: APIClient, enqueue_task: Callable[..., int]
) -> None:
    shown = api_client.get(f"/jobs/{enqueue_task()}").json()
    assert (shown["errors"], shown["error_count"]) == ([], 0)
    assert (shown["last_error"], shown["last_error_truncated"]) == (None, False)


def test_list__500_tasks_of_256_kib_errors__answer_stays_small(
    api_client: APIClient, enqueue_task: Callable[..., int]
) -> None:
    # 12 tasks with 10 errors of 256 KiB each: 30 MB kept, which the answer must not carry.
    for _ in range(12):
        _dead_with_errors(enqueue_task, old=9, size=256 * KIB)

    response = api_client.get("/jobs?limit=500")

    assert response.status_code == 200
    assert len(response.json()["results"]) == 12
    # Per task: 5 errors and last_error of 1024 characters, plus the fields around them.
    assert len(response.content) < 12 * 8 * KIB, len(response.content)

"""Schedules under concurrency, on PostgreSQL: racing creations never pass BROKER_MAX_SCHEDULES,
and sweepers firing at once fire each due time exactly once."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.test import Client, override_settings

from broker.models import Schedule, Task
from broker.queue.base import current_time
from broker.sweeper import sweep_once
from tests.concurrency.conftest import in_thread

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@override_settings(BROKER_MAX_SCHEDULES=5)
def test_create__12_at_once_beside_the_cap__exactly_5_made_the_rest_400() -> None:
    go = threading.Barrier(12)
    answers: list[int] = []
    errors: list[BaseException] = []

    def make(i: int) -> None:
        body = {"name": f"race-{i}", "every_s": 60, "job": {"payload": i}}
        go.wait()
        answers.append(
            Client().post("/schedules", body, content_type="application/json").status_code
        )

    threads = [in_thread(lambda i=i: make(i), errors) for i in range(12)]
    for thread in threads:
        thread.join(30)

    assert not errors, errors
    assert sorted(answers) == [201] * 5 + [400] * 7
    assert Schedule.objects.count() == 5


def test_four_sweepers_at_once__300_due_schedules__each_fires_once() -> None:
    now = current_time()
    Schedule.objects.bulk_create(
        Schedule(name=f"due-{i}", every_s=3600, job='{"payload": 1, "queue": "fired"}',
                 anchored_at=now - timedelta(seconds=1), created_at=now, next_run_at=now)
        for i in range(300)
    )  # fmt: skip
    go = threading.Barrier(4)
    fired: list[int] = []
    errors: list[BaseException] = []

    def sweep() -> None:
        go.wait()
        fired.append(sweep_once(housekeeping=False, fire_for_s=None).fired)

    threads = [in_thread(sweep, errors) for _ in range(4)]
    for thread in threads:
        thread.join(60)

    assert not errors, errors
    assert sum(fired) == 300
    assert Task.objects.filter(queue="fired").count() == 300
    assert not Schedule.objects.filter(last_task_id__isnull=True).exists()

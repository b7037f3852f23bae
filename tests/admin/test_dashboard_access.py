"""The dashboard shows a staff user only what their admin permissions let them view (API.md,
Errors): counts to who may view tasks or queues, dead tasks' errors to who may view tasks or the
dead-letter queue, running tasks, progress and keys to who may view tasks, queue settings to who
may view queues. data.json leaves the rest empty; the page leaves it out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from broker import queue, queues
from broker.queue import NewTask, Report

pytestmark = pytest.mark.django_db

PAGE, DATA, HISTORY = "/dashboard/", "/dashboard/data.json", "/dashboard/history.json"
# What each part would show, written where no other part shows it.
ERROR = "charge declined for card 4242"
PROGRESS = "row 40 of 100 for acme-corp"
KEY = "tenant-acme-corp"
RUNNING_QUEUE = "billing-runs"


@pytest.fixture
def seeded() -> dict[str, Any]:
    """A dead task with ERROR, a running task of KEY in a fair queue that reported PROGRESS."""
    from tests.admin.factories import make_dead

    (dead,) = make_dead(error=ERROR, queue_name="payments")
    queues.update(RUNNING_QUEUE, {"fair": True})
    queue.enqueue(NewTask(payload="{}", queue=RUNNING_QUEUE, key=KEY))
    (held,) = queue.claim([RUNNING_QUEUE], 60_000, worker="host-a:1:worker-1")
    queue.progress(held.task.pk, lease_id=held.lease_id, report=Report(0.4, PROGRESS))
    return {"dead": dead, "running": held.task.pk}


def secrets_in(text: str) -> set[str]:
    return {s for s in (ERROR, PROGRESS, KEY, RUNNING_QUEUE) if s in text}


def test_data__staff_without_permissions__nothing_but_the_time(
    user_with: Callable[..., Client], seeded: dict[str, Any]
) -> None:
    client = user_with()

    data = client.get(DATA)

    assert data.status_code == 200
    body = data.json()
    assert secrets_in(data.content.decode()) == set()
    assert f'"{seeded["running"]}"' not in data.content.decode()  # ids are JSON strings
    assert (body["running"], body["top_errors"], body["top_keys"]) == ([], [], {})
    assert (body["gauges"], body["totals"], body["queues"], body["queue_settings"]) == ({},) * 4
    assert (body["invariant"], body["oldest_ready_age_s"]) == (None, None)


def test_page__staff_without_permissions__says_so_and_shows_nothing(
    user_with: Callable[..., Client], seeded: dict[str, Any]
) -> None:
    page = user_with().get(PAGE)

    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="dashboard-nothing"' in html
    assert secrets_in(html) == set()
    assert 'id="dashboard-initial"' not in html and 'id="history-initial"' not in html


def test_history__staff_without_permissions__403_json(user_with: Callable[..., Client]) -> None:
    got = user_with().get(HISTORY)

    assert got.status_code == 403
    assert got.json() == {"error": "Your admin permissions let you view neither tasks nor queues."}


def test_data__view_tasks_only__tasks_errors_keys_counts_but_no_queue_settings(
    user_with: Callable[..., Client], seeded: dict[str, Any]
) -> None:
    body = user_with("view_task").get(DATA).json()

    (running,) = body["running"]
    assert (running["id"], running["progress"]["message"]) == (str(seeded["running"]), PROGRESS)
    assert [k["key"] for k in body["top_keys"][RUNNING_QUEUE]["top"]] == [KEY]
    (error,) = body["top_errors"]
    assert error["error"] == ERROR
    # No view of the dead-letter queue: the link lists the dead tasks among all tasks.
    assert error["dlq_url"].startswith(
        reverse("admin:broker_task_changelist") + "?state__exact=dead"
    )
    assert body["gauges"]["dead"] == 1 and body["gauges"]["handed_out"] == 1
    assert body["queue_settings"] == {}


def test_page__view_tasks_only__no_link_to_the_dead_letter_queue(
    user_with: Callable[..., Client], seeded: dict[str, Any]
) -> None:
    html = user_with("view_task").get(PAGE).content.decode()

    assert 'id="running-table"' in html and 'id="top-errors"' in html and 'id="history"' in html
    assert reverse("admin:broker_deadtask_changelist") not in html


def test_data__view_dead_letter_queue_only__its_errors_alone(
    user_with: Callable[..., Client], seeded: dict[str, Any]
) -> None:
    data = user_with("view_deadtask").get(DATA)

    body = data.json()
    (error,) = body["top_errors"]
    assert error["dlq_url"].startswith(reverse("admin:broker_deadtask_changelist") + "?")
    assert secrets_in(data.content.decode()) == {ERROR}
    assert body["gauges"] == {} and body["running"] == []


def test_data__view_queues_only__counts_and_settings_no_tasks(
    user_with: Callable[..., Client], seeded: dict[str, Any]
) -> None:
    client = user_with("view_queue")
    body = client.get(DATA).json()

    assert body["queue_settings"][RUNNING_QUEUE]["fair"] is True
    assert body["queues"][RUNNING_QUEUE]["handed_out"] == 1
    assert (body["running"], body["top_errors"], body["top_keys"]) == ([], [], {})
    assert client.get(HISTORY).status_code == 200


def test_data__change_permission__views_as_admin_does(
    user_with: Callable[..., Client], seeded: dict[str, Any]
) -> None:
    body = user_with("change_task").get(DATA).json()

    assert [r["id"] for r in body["running"]] == [str(seeded["running"])]


def test_data__superuser__everything(admin_client: Client, seeded: dict[str, Any]) -> None:
    data = admin_client.get(DATA)

    assert secrets_in(data.content.decode()) == {ERROR, PROGRESS, KEY, RUNNING_QUEUE}
    body = data.json()
    assert body["top_errors"][0]["dlq_url"].startswith(
        reverse("admin:broker_deadtask_changelist") + "?"
    )
    assert body["queue_settings"][RUNNING_QUEUE]["fair"] is True
    assert admin_client.get(HISTORY).status_code == 200
    html = admin_client.get(PAGE).content.decode()
    assert secrets_in(html) == {ERROR, PROGRESS, KEY, RUNNING_QUEUE}

"""The dashboard page and its JSON snapshot: staff only, and its numbers are the broker's."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.urls import reverse

from broker import queue
from broker.models import Task

PAGE = "/dashboard/"
DATA = "/dashboard/data.json"
DLQ = reverse("admin:broker_deadtask_changelist")
pytestmark = pytest.mark.django_db


def test_routes__under_dashboard() -> None:
    assert reverse("dashboard:index") == PAGE
    assert reverse("dashboard:data") == DATA


def test_dashboard__anonymous__redirected_to_admin_login(client: Client) -> None:
    response = client.get(PAGE)
    assert response.status_code == 302
    assert response["Location"] == f"/admin/login/?next={PAGE}"


def test_dashboard__non_staff_user__redirected_and_data_403(
    user_with: Callable[..., Client],
) -> None:
    client = user_with("view_task", "view_deadtask", staff=False)

    page = client.get(PAGE)
    data = client.get(DATA)

    assert page.status_code == 302
    assert page["Location"].startswith("/admin/login/")
    assert data.status_code == 403
    assert data.json() == {"error": "Staff login required."}


def test_data__anonymous__403_json(client: Client) -> None:
    response = client.get(DATA)
    assert response.status_code == 403
    assert response["Content-Type"] == "application/json"


def test_dashboard__staff__page_with_first_snapshot_and_own_assets(
    user_with: Callable[..., Client], enqueue_task: Callable[..., int]
) -> None:
    enqueue_task()
    html = user_with("view_task").get(PAGE).content.decode()

    assert '<canvas id="rate-plot"' in html
    assert 'id="dashboard-initial"' in html
    assert '"ready": 1' in html
    assert 'src="/static/broker/dashboard.js"' in html
    assert 'href="/static/broker/dashboard.css"' in html
    assert "//cdn" not in html and "https://" not in html


def test_data__numbers__equal_the_stats_endpoint(
    admin_client: Client,
    api_client,
    dead: Callable[..., list[int]],
    enqueue_task: Callable[..., int],
) -> None:
    dead(2, error="boom")
    enqueue_task(queue="mail")
    enqueue_task(delay_ms=60_000)
    d = queue.claim(["default"], 30_000)
    assert not d  # the only default task is delayed
    got = queue.claim(["mail"], 30_000)[0]
    queue.ack(got.task.pk, lease_id=got.lease_id)

    snap = admin_client.get(DATA).json()
    stats = api_client.get("/stats").json()

    gauges = ("ready", "handed_out", "delayed", "dead", "blocked")
    assert snap["gauges"] == {k: stats[k] for k in gauges}
    assert snap["totals"] == stats["totals"]
    assert snap["queues"] == stats["queues"]
    assert snap["invariant"] == {
        "healthy": True,
        "nacked_plus_reclaimed": 2,
        "retried_plus_buried": 2,
    }


def test_data__invariant_broken__reported_unhealthy(admin_client: Client) -> None:
    from django.db.models import F

    from broker.models import QueueCounter

    row = {"queue": "default", "shard": 0}
    QueueCounter.objects.get_or_create(**row)
    # A counter moved without its partner (what a transition outside broker.queue could do).
    QueueCounter.objects.filter(**row).update(nacked=F("nacked") + 1)
    snap = admin_client.get(DATA).json()
    QueueCounter.objects.filter(**row).update(retried=F("retried") + 1)  # consistent again
    assert snap["invariant"]["healthy"] is False


def test_data__oldest_ready_age__from_the_oldest_ready_task(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    assert admin_client.get(DATA).json()["oldest_ready_age_s"] is None
    old, new = enqueue_task(), enqueue_task(priority=0)
    Task.objects.filter(pk=old).update(
        available_at=Task.objects.get(pk=old).available_at - timedelta(minutes=5)
    )
    Task.objects.filter(pk=new).update(
        available_at=Task.objects.get(pk=new).available_at - timedelta(seconds=10)
    )

    age = admin_client.get(DATA).json()["oldest_ready_age_s"]

    assert 300 <= age < 310


def test_data__top_errors__most_common_first_with_dlq_links(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    dead(3, error="connection refused")
    dead(1, error="disk full")
    long_error = "Traceback: " + "y" * 400
    dead(2, error=long_error)
    dead(1, error=None)  # "lease expired"

    top = admin_client.get(DATA).json()["top_errors"]

    assert [(e["error"], e["count"]) for e in top] == [
        ("connection refused", 3),
        (long_error[:200], 2),
        ("disk full", 1),
        ("lease expired", 1),
    ]
    assert top[0]["dlq_url"] == f"{DLQ}?{urlencode({'last_error__exact': 'connection refused'})}"
    assert top[1]["dlq_url"] == f"{DLQ}?{urlencode({'last_error__startswith': long_error[:200]})}"


def test_top_error_link__opens_the_dlq_filtered_on_that_error(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    refused = dead(2, error="connection refused")
    other = dead(1, error="connection refused twice")

    link = admin_client.get(DATA).json()["top_errors"][0]["dlq_url"]
    html = admin_client.get(link).content.decode()

    for pk in refused:
        assert f"/admin/broker/deadtask/{pk}/change/" in html
    assert f"/admin/broker/deadtask/{other[0]}/change/" not in html


def test_data__api_tokens_set__session_is_enough_no_bearer_token(
    admin_client: Client, settings
) -> None:
    settings.BROKER_API_TOKENS = ["secret-token"]
    assert admin_client.get(DATA).status_code == 200
    assert admin_client.get(PAGE).status_code == 200
    assert admin_client.get("/stats").status_code == 401  # the API itself still wants its token


# -- running tasks and history ----------------------------------------------------------------

HISTORY = "/dashboard/history.json"


def test_data__running_tasks__longest_first_with_their_progress(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    enqueue_task(queue="imports", type=None)
    enqueue_task(queue="mail")
    first = queue.claim(["imports"], 60_000, worker="host:1:worker-1")[0]
    queue.progress(
        first.task.pk,
        lease_id=first.lease_id,
        report=queue.Report(fraction=0.4, message="row 40 of 100"),
    )
    second = queue.claim(["mail"], 60_000)[0]

    running = admin_client.get(DATA).json()["running"]

    assert [r["id"] for r in running] == [str(first.task.pk), str(second.task.pk)]
    shown = running[0]
    assert (shown["queue"], shown["worker"], shown["attempts"]) == ("imports", "host:1:worker-1", 1)
    assert (shown["progress"]["fraction"], shown["progress"]["message"]) == (0.4, "row 40 of 100")
    assert shown["url"] == reverse("admin:broker_task_change", args=[first.task.pk])
    assert running[1]["progress"] is None
    queue.ack(first.task.pk, lease_id=first.lease_id)
    assert [r["id"] for r in admin_client.get(DATA).json()["running"]] == [str(second.task.pk)]


def test_dashboard__page__history_of_the_last_hour_embedded_and_charting_assets(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    enqueue_task(queue="reports")
    enqueue_task(queue="reports")
    html = admin_client.get(PAGE).content.decode()

    assert 'id="history-initial"' in html
    assert '"enqueued": 2' in html  # the current minute, before any recording
    assert 'src="/static/broker/vendor/uplot/uPlot.iife.min.js"' in html
    assert 'href="/static/broker/vendor/uplot/uPlot.min.css"' in html
    assert 'src="/static/broker/history.js"' in html
    assert '<option value="reports">reports</option>' in html
    assert "//cdn" not in html and "https://" not in html


def test_history_json__staff__the_apis_answer(
    admin_client: Client, api_client, enqueue_task: Callable[..., int], settings
) -> None:
    enqueue_task(queue="a")
    settings.BROKER_API_TOKENS = ["secret-token"]  # the session is enough, as for data.json
    got = admin_client.get(f"{HISTORY}?step=3600&queue=a")
    assert got.status_code == 200
    assert got["Cache-Control"] == "no-store"
    settings.BROKER_API_TOKENS = []
    assert got.json() == api_client.get("/stats/history?step=3600&queue=a").json()
    assert [p["enqueued"] for p in got.json()["points"]] == [1]


def test_history_json__bad_parameter__400_json(admin_client: Client) -> None:
    got = admin_client.get(f"{HISTORY}?step=5")
    assert got.status_code == 400
    assert list(got.json()["fields"]) == ["step"]


def test_history_json__anonymous__403_json(client: Client) -> None:
    got = client.get(HISTORY)
    assert got.status_code == 403
    assert got.json() == {"error": "Staff login required."}

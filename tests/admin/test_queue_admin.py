"""Admin for queue settings and schedules: lists, pause/resume actions, edits through the same
functions as the API; a task's page says why it waits."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from broker import queue, queues, schedules
from broker.models import Queue, Schedule

pytestmark = pytest.mark.django_db

QUEUES = "/admin/broker/queue/"
SCHEDULES = "/admin/broker/schedule/"


def test_queue_list__every_named_queue_with_settings_and_gauges(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    enqueue_task(queue="mail")
    enqueue_task(queue="mail")
    queues.update("reports", {"paused": True, "max_in_flight": 3})
    html = admin_client.get(QUEUES).content.decode()
    assert 'class="field-name"><a href="/admin/broker/queue/mail/change/">mail</a>' in html
    assert "/admin/broker/queue/reports/change/" in html
    assert '<td class="field-ready">2</td>' in html


def test_queue_actions__pause_then_resume__through_broker_queues(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    enqueue_task(queue="mail")
    admin_client.get(QUEUES)  # lists it
    r = admin_client.post(QUEUES, {"action": "pause_selected", "_selected_action": ["mail"]})
    assert r.status_code == 302
    assert Queue.objects.get(name="mail").paused is True
    assert queue.claim(["mail"], 1000) == []
    admin_client.post(QUEUES, {"action": "resume_selected", "_selected_action": ["mail"]})
    assert Queue.objects.get(name="mail").paused is False
    assert len(queue.claim(["mail"], 1000)) == 1


def test_queue_change_form__limits_saved_through_update(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    queues.update("api", {"rate_per_s": 5})
    calls = []
    real = queues.update
    monkeypatch.setattr(queues, "update", lambda n, c: calls.append((n, c)) or real(n, c))
    r = admin_client.post(
        f"{QUEUES}api/change/", {"paused": "on", "max_in_flight": "7", "rate_per_s": "5"}
    )
    assert r.status_code == 302, r.content.decode()[:2000]
    assert calls == [("api", {"paused": True, "max_in_flight": 7})]
    row = Queue.objects.get(name="api")
    assert (row.paused, row.max_in_flight, row.rate_per_s) == (True, 7, 5.0)


def test_queue_change_form__bad_limit__error_nothing_saved(admin_client: Client) -> None:
    queues.update("api", {})
    r = admin_client.post(f"{QUEUES}api/change/", {"max_in_flight": "0", "rate_per_s": "-2"})
    assert r.status_code == 200
    assert "errorlist" in r.content.decode()
    assert Queue.objects.get(name="api").max_in_flight is None


def test_queue_list_editable__limits_saved_through_update(admin_client: Client) -> None:
    queues.update("api", {})
    r = admin_client.post(
        QUEUES,
        {"form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-0-name": "api",
         "form-0-max_in_flight": "2", "form-0-rate_per_s": "0.5", "_save": "Save"},
    )  # fmt: skip
    assert r.status_code == 302, r.content.decode()[:3000]
    row = Queue.objects.get(name="api")
    assert (row.max_in_flight, row.rate_per_s, row.tokens) == (2, 0.5, 1.0)


def test_queue_list__editable_limits_have_a_save_button(admin_client: Client) -> None:
    queues.update("api", {})
    html = admin_client.get(QUEUES).content.decode()
    assert 'name="form-0-max_in_flight"' in html and 'min="1"' in html
    assert '<input type="submit" name="_save"' in html  # else Enter ran the action form


def test_queue_list_editable__bad_limit__error_shown_nothing_saved(admin_client: Client) -> None:
    queues.update("api", {})
    r = admin_client.post(
        QUEUES,
        {"form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-0-name": "api",
         "form-0-max_in_flight": "0", "form-0-rate_per_s": "", "_save": "Save"},
    )  # fmt: skip
    assert r.status_code == 200
    assert "Must be an integer from 1" in r.content.decode()
    assert Queue.objects.get(name="api").max_in_flight is None


@pytest.mark.parametrize("name", ["bad name!", "ünï", "a/b"])
def test_queue_add__a_name_the_api_refuses__error_shown_nothing_made(
    admin_client: Client, name: str
) -> None:
    r = admin_client.post(f"{QUEUES}add/", {"name": name, "rate_per_s": ""})
    assert r.status_code == 200, r.content[:300]
    assert "Must match [A-Za-z0-9_.-]{1,64}" in r.content.decode()
    assert not Queue.objects.filter(name=name).exists()


def test_schedule_add__saved_through_create(admin_client: Client) -> None:
    r = admin_client.post(
        f"{SCHEDULES}add/",
        {"name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Paris",
         "job": json.dumps({"payload": {"r": 1}, "queue": "reports"})},
    )  # fmt: skip
    assert r.status_code == 302, r.content.decode()[:3000]
    s = Schedule.objects.get(name="nightly")
    assert s.next_run_at is not None and s.every_s is None
    assert json.loads(s.job) == {"payload": {"r": 1}, "queue": "reports"}


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"cron": "0 3 * *"}, "cron"),
        ({"cron": "0 3 * * *", "timezone": "Nowhere/Land"}, "Not a time zone"),
        ({"cron": "0 3 * * *", "timezone": "America"}, "Not a time zone"),
        ({"every_s": "30", "job": "{not json"}, "Not JSON."),
        ({"every_s": "30", "job": "[" * 100_000 + "]" * 100_000}, "Not JSON."),
        ({"every_s": "30", "job": json.dumps({"payload": 1, "max_attempt": 2})}, "max_attempt"),
    ],
)
def test_schedule_add__bad__shown_nothing_saved(
    admin_client: Client, fields: dict[str, str], error: str
) -> None:
    body = {"name": "n", "job": json.dumps({"payload": 1}), **fields}
    r = admin_client.post(f"{SCHEDULES}add/", body)
    assert r.status_code == 200
    assert error in r.content.decode()
    assert not Schedule.objects.exists()


def test_schedule_add__at_broker_max_schedules__shown_nothing_saved(
    admin_client: Client, settings: Any
) -> None:
    settings.BROKER_MAX_SCHEDULES = 1
    schedules.create({"name": "only", "every_s": 30, "job": {"payload": 1}})
    body = {"name": "second", "every_s": "30", "job": json.dumps({"payload": 1})}
    r = admin_client.post(f"{SCHEDULES}add/", body)
    assert r.status_code == 200
    assert "At most 1 schedules may exist" in r.content.decode()
    assert list(Schedule.objects.values_list("name", flat=True)) == ["only"]


def test_schedule_list_and_actions(admin_client: Client) -> None:
    schedules.create({"name": "tick", "every_s": 30, "job": {"payload": 1}})
    html = admin_client.get(SCHEDULES).content.decode()
    assert "every 30 s" in html
    admin_client.post(SCHEDULES, {"action": "pause_selected", "_selected_action": ["tick"]})
    s = Schedule.objects.get(name="tick")
    assert s.paused is True and s.next_run_at is None
    admin_client.post(SCHEDULES, {"action": "resume_selected", "_selected_action": ["tick"]})
    assert Schedule.objects.get(name="tick").next_run_at is not None


def test_schedule_actions__only_those_that_change_are_counted(admin_client: Client) -> None:
    schedules.create({"name": "on", "every_s": 30, "job": {"payload": 1}})
    schedules.create({"name": "off", "every_s": 30, "job": {"payload": 1}, "paused": True})
    due = Schedule.objects.get(name="on").next_run_at
    r = admin_client.post(
        SCHEDULES, {"action": "resume_selected", "_selected_action": ["on", "off"]}, follow=True
    )
    assert "1 schedule resumed." in r.content.decode()
    assert Schedule.objects.get(name="on").next_run_at == due  # the running one left as it was
    r = admin_client.post(
        SCHEDULES, {"action": "pause_selected", "_selected_action": ["on", "off"]}, follow=True
    )
    assert "2 schedules paused." in r.content.decode()


def test_schedule_change__retimed__next_run_recomputed(admin_client: Client) -> None:
    before = schedules.create({"name": "tick", "every_s": 3600, "job": {"payload": 1}})
    r = admin_client.post(
        f"{SCHEDULES}tick/change/", {"every_s": "5", "job": json.dumps({"payload": 2})}
    )
    assert r.status_code == 302, r.content.decode()[:3000]
    after = Schedule.objects.get(name="tick")
    assert after.every_s == 5 and after.next_run_at < before.next_run_at
    assert json.loads(after.job) == {"payload": 2}


def test_schedule_change__zone_a_tzdata_folder__shown_nothing_changed(
    admin_client: Client,
) -> None:
    schedules.create({"name": "n", "cron": "0 3 * * *", "job": {"payload": 1}})
    r = admin_client.post(
        f"{SCHEDULES}n/change/",
        {"cron": "0 3 * * *", "timezone": "Europe", "job": json.dumps({"payload": 1})},
    )
    assert r.status_code == 200
    assert "Not a time zone" in r.content.decode()
    assert Schedule.objects.get(name="n").timezone == "UTC"


def test_task_page__says_why_it_waits(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    pk = enqueue_task(queue="mail")
    queues.update("mail", {"paused": True})
    html = admin_client.get(f"/admin/broker/task/{pk}/change/").content.decode()
    assert '<b class="broker-waiting">queue_paused</b>' in html
    assert "The queue &#x27;mail&#x27; is paused" in html


def test_dashboard_data__paused_limited_and_keyed_queues(admin_client: Client) -> None:
    queues.update("mail", {"paused": True})
    queues.update("api", {"max_in_flight": 4, "rate_per_s": 2.5})
    queues.update("ledger", {"ordered": True})
    queues.update("imports", {"fair": True, "key_max_in_flight": 2})
    queues.update("plain", {})
    snap = admin_client.get("/dashboard/data.json").json()
    keyless = {"fair": False, "key_max_in_flight": None, "ordered": False}
    unlimited = {"paused": False, "max_in_flight": None, "rate_per_s": None}
    assert snap["queue_settings"] == {
        "api": {"paused": False, "max_in_flight": 4, "rate_per_s": 2.5, **keyless},
        "imports": {**unlimited, "fair": True, "key_max_in_flight": 2, "ordered": False},
        "ledger": {**unlimited, "fair": False, "key_max_in_flight": None, "ordered": True},
        "mail": {"paused": True, "max_in_flight": None, "rate_per_s": None, **keyless},
    }

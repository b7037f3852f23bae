"""POST/GET/PATCH/DELETE /schedules: validation as POST /jobs, timing, pause and resume."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from broker.models import Schedule
from tests.api.conftest import TIMESTAMP, parse_time, patch
from tests.conftest import post

pytestmark = pytest.mark.django_db

JOB = {"payload": {"report": "daily"}, "queue": "reports"}


def create(client, **body: Any) -> Any:
    body.setdefault("job", JOB)
    return post(client, "/schedules", body)


def test_create__cron_in_a_time_zone__201_with_next_run(api_client) -> None:
    r = create(api_client, name="nightly-report", cron="0 3 * * *", timezone="Europe/Paris")
    assert r.status_code == 201, r.content
    assert r["Location"] == "/schedules/nightly-report"
    body = r.json()
    next_run = body.pop("next_run_at")
    assert body == {
        "name": "nightly-report", "cron": "0 3 * * *", "timezone": "Europe/Paris",
        "every_s": None, "job": JOB, "paused": False, "last_run_at": None, "last_task_id": None,
    }  # fmt: skip
    at = parse_time(next_run)
    from zoneinfo import ZoneInfo

    local = at.astimezone(ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute) == (3, 0)
    assert timedelta(0) < at - datetime.now(UTC) <= timedelta(days=1)


def test_create__cron_without_time_zone__utc(api_client) -> None:
    body = create(api_client, name="n", cron="*/5 * * * *").json()
    assert body["timezone"] == "UTC"
    assert parse_time(body["next_run_at"]).minute % 5 == 0


def test_create__every_s__first_due_one_interval_on(api_client) -> None:
    before = datetime.now(UTC)
    body = create(api_client, name="tick", every_s=30).json()
    assert (body["cron"], body["timezone"], body["every_s"]) == (None, None, 30)
    at = parse_time(body["next_run_at"])
    assert before + timedelta(seconds=30) - timedelta(milliseconds=1) <= at
    assert at <= datetime.now(UTC) + timedelta(seconds=30)


def test_create__same_name__409(api_client) -> None:
    assert create(api_client, name="n", every_s=5).status_code == 201
    r = create(api_client, name="n", every_s=9)
    assert r.status_code == 409
    assert r.json() == {"error": "A schedule with this name exists."}
    assert Schedule.objects.get(name="n").every_s == 5


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "n", "cron": "0 3 * *"}, "cron"),
        ({"name": "n", "cron": "61 * * * *"}, "cron"),
        ({"name": "n", "cron": "0 3 * * * *"}, "cron"),
        ({"name": "n", "cron": 5}, "cron"),
        ({"name": "n", "cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"name": "n", "cron": "0 3 * * *", "timezone": ""}, "timezone"),
        # tzdata folders and over-long names: ZoneInfo raises OSError for these, not "not found"
        ({"name": "n", "cron": "0 3 * * *", "timezone": "America"}, "timezone"),
        ({"name": "n", "cron": "0 3 * * *", "timezone": "Etc"}, "timezone"),
        ({"name": "n", "cron": "0 3 * * *", "timezone": "Europe/"}, "timezone"),
        ({"name": "n", "cron": "0 3 * * *", "timezone": "x" * 300}, "timezone"),
        ({"name": "n", "cron": "0 3 * * *", "timezone": "Europe/" + "P" * 293}, "timezone"),
        ({"name": "n", "every_s": 0}, "every_s"),
        ({"name": "n", "every_s": 1.5}, "every_s"),
        ({"name": "n", "every_s": True}, "every_s"),
        ({"name": "n", "every_s": 30, "timezone": "UTC"}, "timezone"),
        ({"name": "n"}, "cron"),
        ({"name": "n", "cron": "0 3 * * *", "every_s": 30}, "cron"),
        ({"cron": "0 3 * * *"}, "name"),
        ({"name": "a b", "every_s": 5}, "name"),
        ({"name": "n", "every_s": 5, "paused": None}, "paused"),
        ({"name": "n", "every_s": 5, "nmae": 1}, "nmae"),
        ({"name": "n", "every_s": 5, "job": {"payload": 1, "max_attempt": 3}}, "job.max_attempt"),
        ({"name": "n", "every_s": 5, "job": {"payload": 1, "queue": "a b"}}, "job.queue"),
        ({"name": "n", "every_s": 5, "job": {"max_attempts": 3}}, "job.payload"),
        ({"name": "n", "every_s": 5, "job": {"payload": {}, "type": "nope"}}, "job.type"),
        ({"name": "n", "every_s": 5, "job": {"payload": {}, "type": "sleep_job"} | {
            "payload": {"duration_seconds": -1}}}, "job.payload.duration_seconds"),
        ({"name": "n", "every_s": 5, "job": {"payload": 1, "idempotency_key": "k"}},
         "job.idempotency_key"),
        ({"name": "n", "every_s": 5, "job": None}, "job"),
    ],
)  # fmt: skip
def test_create__bad__400_naming_the_field_and_nothing_made(
    api_client, body: dict[str, Any], field: str
) -> None:
    r = create(api_client, **body)
    assert r.status_code == 400, r.content
    assert field in r.json()["fields"], r.json()
    assert not Schedule.objects.exists()


def test_create__typed_job__validated_like_post_jobs(api_client) -> None:
    job = {"payload": {"duration_seconds": 1}, "type": "sleep_job"}
    r = create(api_client, name="sleepy", every_s=60, job=job)
    assert r.status_code == 201
    assert r.json()["job"] == job


def test_create_and_patch__job_after_a_cancelled_or_unknown_task__400_as_post_jobs(
    api_client, enqueue
) -> None:
    cancelled = enqueue()
    assert api_client.delete(f"/jobs/{cancelled}").status_code == 204
    job = {"payload": 1, "after": ["999999", cancelled]}
    r = create(api_client, name="n", every_s=5, job=job)
    assert r.status_code == 400, r.content
    assert set(r.json()["fields"]) == {"job.after.0"}
    r = create(api_client, name="n", every_s=5, job={"payload": 1, "after": [cancelled]})
    assert list(r.json()["fields"]) == ["job.after.0"]
    finished = {"payload": 1, "after": [cancelled], "after_policy": "finished"}
    assert create(api_client, name="n", every_s=5, job=finished).status_code == 201
    body = json.dumps({"job": {"payload": 1, "after": [cancelled]}})
    r = api_client.patch("/schedules/n", body, content_type="application/json")
    assert r.status_code == 400 and list(r.json()["fields"]) == ["job.after.0"], r.content
    assert api_client.get("/schedules/n").json()["job"] == finished


def test_list_and_get_and_404(api_client) -> None:
    create(api_client, name="b", every_s=5)
    create(api_client, name="a", cron="0 * * * *")
    r = api_client.get("/schedules")
    assert r.status_code == 200
    assert [s["name"] for s in r.json()["results"]] == ["a", "b"]
    assert api_client.get("/schedules/b").json()["every_s"] == 5
    r = api_client.get("/schedules/zzz")
    assert r.status_code == 404 and r.json() == {"error": "No such schedule."}


def test_delete__204_then_404(api_client) -> None:
    create(api_client, name="gone", every_s=5)
    assert api_client.delete("/schedules/gone").status_code == 204
    assert api_client.get("/schedules/gone").status_code == 404
    r = api_client.delete("/schedules/gone")
    assert r.status_code == 404 and r.json() == {"error": "No such schedule."}


def test_patch__timing_change__recomputes_next_run(api_client) -> None:
    create(api_client, name="n", every_s=3600)
    r = patch(api_client, "/schedules/n", {"every_s": 10})
    assert r.status_code == 200
    at = parse_time(r.json()["next_run_at"])
    assert at <= datetime.now(UTC) + timedelta(seconds=10)
    r = patch(api_client, "/schedules/n", {"cron": "30 4 * * *", "timezone": "Asia/Tokyo"})
    body = r.json()
    assert (body["cron"], body["timezone"], body["every_s"]) == ("30 4 * * *", "Asia/Tokyo", None)
    from zoneinfo import ZoneInfo

    local = parse_time(body["next_run_at"]).astimezone(ZoneInfo("Asia/Tokyo"))
    assert (local.hour, local.minute) == (4, 30)
    back = patch(api_client, "/schedules/n", {"every_s": 60}).json()
    assert (back["cron"], back["timezone"], back["every_s"]) == (None, None, 60)


def test_patch__job_only__keeps_next_run(api_client) -> None:
    first = create(api_client, name="n", every_s=60).json()
    job = {"payload": [1, 2], "queue": "other", "priority": "high"}
    r = patch(api_client, "/schedules/n", {"job": job})
    assert r.status_code == 200
    assert r.json()["job"] == job
    assert r.json()["next_run_at"] == first["next_run_at"]


def test_patch__pause_then_resume__next_run_null_then_after_now(api_client) -> None:
    create(api_client, name="n", every_s=60)
    paused = patch(api_client, "/schedules/n", {"paused": True}).json()
    assert paused["paused"] is True and paused["next_run_at"] is None
    resumed = patch(api_client, "/schedules/n", {"paused": False}).json()
    assert resumed["paused"] is False
    assert parse_time(resumed["next_run_at"]) > datetime.now(UTC)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"every_s": None}, "cron"),
        ({"timezone": "Europe/Paris"}, "timezone"),
        ({"cron": "0 3 * * *", "timezone": "Europe"}, "timezone"),
        ({"cron": "0 3 * * *", "timezone": "y" * 300}, "timezone"),
        ({"every_s": -5}, "every_s"),
        ({"job": {"payload": 1, "delay_ms": -1}}, "job.delay_ms"),
        ({"paused": "no"}, "paused"),
        ({"name": "renamed"}, "name"),
        ({"next_run_at": "2030-01-01T00:00:00Z"}, "next_run_at"),
    ],
)
def test_patch__bad__400_and_nothing_changes(api_client, body: dict[str, Any], field: str) -> None:
    before = create(api_client, name="n", every_s=60).json()
    r = patch(api_client, "/schedules/n", body)
    assert r.status_code == 400
    assert field in r.json()["fields"]
    assert api_client.get("/schedules/n").json() == before


@pytest.mark.parametrize("method", ["get", "patch", "delete"])
@pytest.mark.parametrize("name", ["a%00b", "%00", "a%20b", "x" * 65])
def test_name_no_schedule_can_have__404_without_a_query(
    api_client, django_assert_num_queries, method: str, name: str
) -> None:
    with django_assert_num_queries(0):
        if method == "patch":
            r = patch(api_client, f"/schedules/{name}", {"paused": True})
        else:
            r = getattr(api_client, method)(f"/schedules/{name}")
    assert r.status_code == 404
    assert r.json() == {"error": "No such schedule."}


def test_patch__unknown__404(api_client) -> None:
    r = patch(api_client, "/schedules/nope", {"paused": True})
    assert r.status_code == 404


def test_times__rfc3339_milliseconds(api_client) -> None:
    body = create(api_client, name="n", every_s=7).json()
    assert TIMESTAMP.match(body["next_run_at"])


@pytest.mark.django_db(transaction=True)
def test_create__at_broker_max_schedules__400_naming_it__room_again_once_one_is_deleted(
    api_client, settings
) -> None:
    settings.BROKER_MAX_SCHEDULES = 3
    for i in range(3):
        assert create(api_client, name=f"s{i}", every_s=60).status_code == 201

    r = create(api_client, name="one-too-many", every_s=60)

    assert r.status_code == 400
    body = r.json()
    assert list(body["fields"]) == ["name"]
    assert "At most 3 schedules" in body["error"] and "At most 3" in body["fields"]["name"][0]
    assert Schedule.objects.count() == 3
    assert create(api_client, name="s1", every_s=60).status_code == 409  # taken: that first
    assert api_client.delete("/schedules/s0").status_code == 204
    assert create(api_client, name="one-too-many", every_s=60).status_code == 201

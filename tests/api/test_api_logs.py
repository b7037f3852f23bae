"""Logs: one INFO line per state change, one per request, and the level from LOG_LEVEL."""

from __future__ import annotations

import logging
import os

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from broker import queue
from broker.queue import NewTask
from tests.procs import python


def _lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


@pytest.mark.django_db
def test_state_change_log__enqueue_claim_ack__one_info_line_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="broker.transitions")
    pk, _ = queue.enqueue(NewTask(payload="{}", queue="mail"))
    (delivery,) = queue.claim(["mail"], 30_000)
    queue.ack(pk, lease_id=delivery.lease_id)

    assert _lines(caplog, "broker.transitions") == [
        f"state_change task={pk} queue=mail from=new to=ready attempts=0",
        f"state_change task={pk} queue=mail from=ready to=handed_out attempts=1",
        f"state_change task={pk} queue=mail from=handed_out to=done attempts=1",
    ]
    record = next(r for r in caplog.records if r.name == "broker.transitions")
    assert record.levelno == logging.INFO
    assert (record.task_id, record.queue, record.from_state, record.to_state) == (
        pk,
        "mail",
        "new",
        "ready",
    )


@pytest.mark.django_db
def test_state_change_log__nack_to_dead_and_cancel__from_and_to_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="broker.transitions")
    dying, _ = queue.enqueue(NewTask(payload="{}", max_attempts=1))
    (d,) = queue.claim(None, 30_000)
    queue.nack(dying, lease_id=d.lease_id, error="boom")
    other, _ = queue.enqueue(NewTask(payload="{}", delay_ms=60_000))
    queue.cancel(other)

    lines = _lines(caplog, "broker.transitions")
    assert f"state_change task={dying} queue=default from=handed_out to=dead attempts=1" in lines
    assert f"state_change task={other} queue=default from=delayed to=cancelled attempts=0" in lines


@pytest.mark.django_db
def test_state_change_log__batch_of_five__one_line_with_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="broker.transitions")
    queue.enqueue_many([NewTask(payload="{}") for _ in range(5)])
    queue.claim(None, 30_000, limit=5)

    assert _lines(caplog, "broker.transitions") == [
        "state_change count=5 from=new to=ready",
        "state_change count=5 from=ready to=handed_out",
    ]


@pytest.mark.django_db
def test_state_change_log__info_disabled__no_record_made(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="broker.transitions")
    queue.enqueue(NewTask(payload="{}"))
    assert [r for r in caplog.records if r.name == "broker.transitions"] == []


@pytest.mark.django_db
@override_settings(BROKER_API_TOKENS=["log-secret-token"])
def test_request_log__method_path_status_duration__no_query_string_no_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    client = APIClient()
    good, bad = "Bearer log-secret-token", "Bearer wrong-token"
    assert client.get("/stats?secret=hunter2", HTTP_AUTHORIZATION=good).status_code == 200
    assert client.get("/stats", HTTP_AUTHORIZATION=bad).status_code == 401

    lines = _lines(caplog, "broker.requests")
    assert len(lines) == 2
    assert lines[0].startswith("request method=GET path=/stats status=200 duration_ms=")
    assert lines[1].startswith("request method=GET path=/stats status=401 duration_ms=")
    assert float(lines[0].rsplit("=", 1)[1]) >= 0
    everything = caplog.text + "".join(str(r.__dict__) for r in caplog.records)
    for secret in ("hunter2", "log-secret-token", "wrong-token"):
        assert secret not in everything


@pytest.mark.django_db
def test_request_log__path_with_spaces_and_newline__stays_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="broker.requests")
    APIClient().get("/no%20such%0Apath")  # decoded: "/no such\npath"
    (line,) = _lines(caplog, "broker.requests")
    assert "\n" not in line
    assert 'path="/no such\\npath" status=404' in line


@pytest.mark.parametrize(("level", "expected"), [("INFO", "INFO"), (None, "WARNING")])
def test_log_level__from_env_log_level(level: str | None, expected: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LOG_LEVEL"}
    if level:
        env["LOG_LEVEL"] = level
    env["DJANGO_SETTINGS_MODULE"] = "queueproject.settings"
    code = "import django, logging; django.setup(); print(logging.getLogger().level)"
    out = python(code, env)
    assert logging.getLevelName(int(out.stdout.strip())) == expected

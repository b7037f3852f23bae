"""GET /stats, GET /dlq, POST /dlq/{id}/requeue and GET /healthz."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from broker.api import views
from tests.conftest import COUNTER_NAMES, post

pytestmark = pytest.mark.django_db


def test_stats__fresh__exact_shape_all_zero(api_client) -> None:
    r = api_client.get("/stats")
    assert r.status_code == 200
    body = r.json()
    assert {k: body[k] for k in ("ready", "handed_out", "delayed", "dead", "blocked")} == {
        "ready": 0,
        "handed_out": 0,
        "delayed": 0,
        "dead": 0,
        "blocked": 0,
    }
    assert list(body["totals"]) == list(COUNTER_NAMES)
    assert set(body["totals"].values()) == {0}
    assert set(body) <= {"ready", "handed_out", "delayed", "dead", "blocked", "totals", "queues"}


@override_settings(BROKER_RETRY_BASE_MS=60_000, BROKER_RETRY_MAX_MS=60_000)
def test_stats__after_each_kind_of_move__gauges_and_totals(api_client, enqueue, claim) -> None:
    for queue_name in ("a", "a", "a", "a", "b"):
        enqueue(queue=queue_name, max_attempts=1 if queue_name == "b" else 3)
    enqueue(queue="a", delay_ms=60_000)
    done, retry, cancel = claim(queue="a"), claim(queue="a"), enqueue(queue="c")
    bury = claim(queue="b")
    post(api_client, f"/jobs/{done['task']['id']}/ack?lease_id={done['lease_id']}")
    post(api_client, f"/jobs/{retry['task']['id']}/nack?lease_id={retry['lease_id']}")
    post(api_client, f"/jobs/{bury['task']['id']}/nack?lease_id={bury['lease_id']}")
    api_client.delete(f"/jobs/{cancel}")
    claim(queue="a")
    body = api_client.get("/stats").json()
    assert {k: body[k] for k in ("ready", "handed_out", "delayed", "dead")} == {
        "ready": 1,
        "handed_out": 1,
        "delayed": 2,
        "dead": 1,
    }
    assert body["totals"] == {
        "enqueued": 7,
        "delivered": 4,
        "acked": 1,
        "nacked": 2,
        "reclaimed": 0,
        "retried": 1,
        "buried": 1,
        "requeued": 0,
        "cancelled": 1,
        "released": 0,
        "deduplicated": 0,
        "suspended": 0,
        "events": 0,
    }
    assert body["blocked"] == 0
    assert body["queues"]["a"] == {
        "ready": 1, "handed_out": 1, "delayed": 2, "dead": 0, "blocked": 0,
    }  # fmt: skip
    assert body["queues"]["b"] == {
        "ready": 0, "handed_out": 0, "delayed": 0, "dead": 1, "blocked": 0,
    }  # fmt: skip


@pytest.fixture
def dead_task(api_client, enqueue, claim) -> str:
    task_id = enqueue(max_attempts=1, payload="p")
    lease = claim()["lease_id"]
    post(api_client, f"/jobs/{task_id}/nack?lease_id={lease}", {"error": "kaput"})
    return task_id


def test_dlq__only_dead_tasks_with_their_error(api_client, enqueue, dead_task) -> None:
    enqueue()
    r = api_client.get("/dlq")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"results", "next"} and body["next"] is None
    [listed] = body["results"]
    assert (listed["id"], listed["state"], listed["last_error"]) == (dead_task, "dead", "kaput")
    assert [(e["attempt"], e["error"]) for e in listed["errors"]] == [(1, "kaput")]


def test_dlq__empty__200(api_client) -> None:
    assert api_client.get("/dlq").json() == {"results": [], "next": None}


def test_requeue__dead__204_ready_attempts_reset_history_kept(
    api_client, dead_task, task, claim
) -> None:
    r = post(api_client, f"/dlq/{dead_task}/requeue")
    assert r.status_code == 204 and r.content == b""
    got = task(dead_task)
    assert (got["state"], got["attempts"], got["last_error"]) == ("ready", 0, None)
    assert [(e["attempt"], e["error"]) for e in got["errors"]] == [(1, "kaput")]
    assert api_client.get("/dlq").json()["results"] == []
    assert api_client.get("/stats").json()["totals"]["requeued"] == 1
    again = claim()
    assert (again["task"]["id"], again["task"]["attempts"]) == (dead_task, 1)


def test_requeue__twice__second_404(api_client, dead_task) -> None:
    assert post(api_client, f"/dlq/{dead_task}/requeue").status_code == 204
    r = post(api_client, f"/dlq/{dead_task}/requeue")
    assert r.status_code == 404
    assert r.json()["error"]


@pytest.mark.parametrize("task_id", ["987654", "abc"])
def test_requeue__unknown__404(api_client, task_id: str) -> None:
    assert post(api_client, f"/dlq/{task_id}/requeue").status_code == 404


def test_requeue__task_not_dead__404(api_client, enqueue, task) -> None:
    task_id = enqueue()
    assert post(api_client, f"/dlq/{task_id}/requeue").status_code == 404
    assert task(task_id)["state"] == "ready"


def test_healthz__200_ok(api_client) -> None:
    r = api_client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_healthz__database_unreachable__503_json(api_client, monkeypatch) -> None:
    class Unreachable:
        def cursor(self) -> None:
            raise DatabaseError("connection refused")

    monkeypatch.setattr(views, "connection", Unreachable())
    r = api_client.get("/healthz")
    assert r.status_code == 503
    assert r.json()["error"]


def test_healthz__the_listener_knows_the_database_away__503_without_a_query(
    api_client, monkeypatch
) -> None:
    """A query would wait BROKER_DB_POOL_TIMEOUT for a connection (8 s): the process's listener
    already knows, so the answer is at once."""
    monkeypatch.setattr(views.hub, "away", True)
    with CaptureQueriesContext(connection) as queries:
        r = api_client.get("/healthz")
    assert (r.status_code, r.json()["status"]) == (503, "unavailable")
    assert len(queries) == 0


@override_settings(BROKER_API_TOKENS=["t-one", "t-two"])
def test_healthz__tokens_set__still_open(api_client) -> None:
    assert api_client.get("/healthz").status_code == 200

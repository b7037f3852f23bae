"""POST /jobs/{id}/progress: reports and checkpoints on held tasks, shown on the task, and the
last checkpoint handed out again with every redelivery."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import override_settings

from broker import queue
from contract.limits import MAX_CHECKPOINT_BYTES, MAX_PROGRESS_MESSAGE
from tests.api.conftest import assert_ahead, parse_time
from tests.conftest import post

pytestmark = pytest.mark.django_db

no_backoff = override_settings(BROKER_RETRY_BASE_MS=0, BROKER_RETRY_MAX_MS=0)


@pytest.fixture
def held(enqueue, claim) -> tuple[str, str, str]:
    """(task id, lease id, deadline) of a task handed out now with a 30 s lease."""
    task_id = enqueue(max_attempts=5)
    body = claim(lease_ms=30_000)
    return task_id, body["lease_id"], body["deadline"]


def report(client: Any, task_id: str, lease: str, body: Any, query: str = "") -> Any:
    return post(client, f"/jobs/{task_id}/progress?lease_id={lease}{query}", body)


# -- the report --------------------------------------------------------------------------------


def test_progress__before_any_report__null(api_client, held, task) -> None:
    task_id, _, _ = held
    got = task(task_id)
    assert (got["progress"], got["checkpoint"]) == (None, None)


def test_progress__report__200_same_deadline_shown_on_the_task(api_client, held, task) -> None:
    task_id, lease, deadline = held
    before = datetime.now(UTC)
    r = report(api_client, task_id, lease, {"fraction": 0.25, "message": "row 250 of 1000"})
    after = datetime.now(UTC)
    assert r.status_code == 200
    assert r.json() == {"deadline": deadline}  # no lease_ms: the lease is left as it was
    got = task(task_id)
    shown = got["progress"]
    assert (shown["fraction"], shown["message"]) == (0.25, "row 250 of 1000")
    assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= parse_time(shown["at"])
    assert parse_time(shown["at"]) <= after
    assert got["checkpoint"] is None
    listed = api_client.get("/jobs?state=handed_out").json()["results"][0]
    assert listed["progress"] == shown


def test_progress__lease_ms__extends_the_lease_capped(api_client, held) -> None:
    task_id, lease, _ = held
    before = datetime.now(UTC)
    r = report(api_client, task_id, lease, {"fraction": 0.5}, "&lease_ms=120000")
    after = datetime.now(UTC)
    assert r.status_code == 200
    assert_ahead(r.json()["deadline"], before, after, 120_000, 120_000)
    r = report(api_client, task_id, lease, {"fraction": 0.6}, "&lease_ms=999999999")
    assert_ahead(r.json()["deadline"], before, datetime.now(UTC), 300_000, 300_000)


def test_progress__lease_ms_in_the_body__extends(api_client, held) -> None:
    task_id, lease, _ = held
    before = datetime.now(UTC)
    r = report(api_client, task_id, lease, {"message": "m", "lease_ms": 60_000})
    assert r.status_code == 200
    assert_ahead(r.json()["deadline"], before, datetime.now(UTC), 60_000, 60_000)


def test_progress__absent_fields_kept__null_clears(api_client, held, task) -> None:
    task_id, lease, _ = held
    body = {"fraction": 0.1, "message": "start", "checkpoint": {"row": 100}}
    assert report(api_client, task_id, lease, body).status_code == 200
    assert report(api_client, task_id, lease, {"fraction": 0.2}).status_code == 200
    got = task(task_id)
    assert (got["progress"]["fraction"], got["progress"]["message"]) == (0.2, "start")
    assert got["checkpoint"] == {"row": 100}
    assert (
        report(api_client, task_id, lease, {"message": None, "checkpoint": None}).status_code == 200
    )
    got = task(task_id)
    assert (got["progress"]["fraction"], got["progress"]["message"]) == (0.2, None)
    assert got["checkpoint"] is None


def test_progress__checkpoint_only__progress_shows_its_time(api_client, held, task) -> None:
    task_id, lease, _ = held
    assert report(api_client, task_id, lease, {"checkpoint": [1, "two"]}).status_code == 200
    got = task(task_id)
    assert got["checkpoint"] == [1, "two"]
    assert (got["progress"]["fraction"], got["progress"]["message"]) == (None, None)
    parse_time(got["progress"]["at"])


@pytest.mark.parametrize(
    "checkpoint", [0, "x", [1, [2]], {"cursor": "✓\u0000", "n": 1.5}, False, {"deep": {"a": []}}]
)
def test_progress__checkpoint__kept_exactly(api_client, held, task, checkpoint: Any) -> None:
    task_id, lease, _ = held
    assert report(api_client, task_id, lease, {"checkpoint": checkpoint}).status_code == 200
    assert task(task_id)["checkpoint"] == checkpoint


def test_progress__message_with_nul__kept_with_replacement_char(api_client, held, task) -> None:
    task_id, lease, _ = held
    assert report(api_client, task_id, lease, {"message": "a\u0000b"}).status_code == 200
    assert task(task_id)["progress"]["message"] == "a\ufffdb"


@pytest.mark.parametrize("fraction", [0, 1, 0.0, 1.0, 0.333])
def test_progress__fraction_bounds__200(api_client, held, task, fraction: float) -> None:
    task_id, lease, _ = held
    assert report(api_client, task_id, lease, {"fraction": fraction}).status_code == 200
    assert task(task_id)["progress"]["fraction"] == fraction


def test_progress__limits_met_exactly__200(api_client, held, task) -> None:
    task_id, lease, _ = held
    # A string of n bytes is n + 2 as JSON: its quotes.
    checkpoint = "é" * ((MAX_CHECKPOINT_BYTES - 2) // 2)
    body = {"message": "m" * MAX_PROGRESS_MESSAGE, "checkpoint": checkpoint}
    assert report(api_client, task_id, lease, body).status_code == 200
    got = task(task_id)
    assert (got["progress"]["message"], got["checkpoint"]) == (body["message"], checkpoint)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"fraction": -0.01}, "fraction"),
        ({"fraction": 1.01}, "fraction"),
        ({"fraction": "0.5"}, "fraction"),
        ({"fraction": True}, "fraction"),
        ({"fraction": [0.5]}, "fraction"),
        ({"message": "m" * (MAX_PROGRESS_MESSAGE + 1)}, "message"),
        ({"message": 3}, "message"),
        ({"message": ["m"]}, "message"),
        ({"checkpoint": "c" * (MAX_CHECKPOINT_BYTES - 1)}, "checkpoint"),
        ({"checkpoint": "é" * (MAX_CHECKPOINT_BYTES // 2)}, "checkpoint"),
        ({"fraction": 0.5, "progres": 1}, "progres"),
        ({}, "body"),
        ({"lease_ms": 1000}, "body"),
        ({"fraction": 0.5, "lease_ms": 0}, "lease_ms"),
        ({"fraction": 0.5, "lease_ms": "1000"}, "lease_ms"),
    ],
)
def test_progress__bad_body__400_names_it_changes_nothing(
    api_client, held, task, body: dict[str, Any], field: str
) -> None:
    task_id, lease, deadline = held
    r = report(api_client, task_id, lease, body)
    assert r.status_code == 400, r.content
    assert list(r.json()["fields"]) == [field]
    got = task(task_id)
    assert (got["progress"], got["checkpoint"], got["lease_deadline"]) == (None, None, deadline)


def test_progress__no_body__400(api_client, held) -> None:
    task_id, lease, _ = held
    r = post(api_client, f"/jobs/{task_id}/progress?lease_id={lease}")
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["body"]


def test_progress__bad_lease_ms_in_query__400(api_client, held) -> None:
    task_id, lease, _ = held
    for bad in ("0", "", "-5", "x"):
        r = report(api_client, task_id, lease, {"fraction": 0.5}, f"&lease_ms={bad}")
        assert r.status_code == 400
        assert list(r.json()["fields"]) == ["lease_ms"]


def test_progress__missing_lease_id__400(api_client, held) -> None:
    task_id, _, _ = held
    r = post(api_client, f"/jobs/{task_id}/progress", {"fraction": 0.5})
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["lease_id"]


def test_progress__lease_in_body__200(api_client, held, task) -> None:
    task_id, lease, _ = held
    r = post(api_client, f"/jobs/{task_id}/progress", {"lease_id": lease, "fraction": 0.5})
    assert r.status_code == 200
    assert task(task_id)["progress"]["fraction"] == 0.5


def test_progress__other_lease__409_changes_nothing(api_client, held, task) -> None:
    task_id, _, _ = held
    r = report(api_client, task_id, "someone-else", {"fraction": 0.5, "checkpoint": 1})
    assert r.status_code == 409
    assert r.json()["error"]
    got = task(task_id)
    assert (got["progress"], got["checkpoint"]) == (None, None)


@pytest.mark.parametrize("task_id", ["987654", "abc", "-1"])
def test_progress__unknown_task__404(api_client, task_id: str) -> None:
    r = report(api_client, task_id, "x", {"fraction": 0.5})
    assert r.status_code == 404
    assert r.json()["error"]


def test_progress__task_not_handed_out__404(api_client, enqueue, task) -> None:
    task_id = enqueue()
    assert report(api_client, task_id, "x", {"fraction": 0.5}).status_code == 404
    assert task(task_id)["progress"] is None


def test_progress__after_ack__404__done_task_keeps_its_last(api_client, held, task) -> None:
    task_id, lease, _ = held
    body = {"fraction": 1, "message": "all rows", "checkpoint": {"row": 1000}}
    assert report(api_client, task_id, lease, body).status_code == 200
    assert post(api_client, f"/jobs/{task_id}/ack?lease_id={lease}").status_code == 204
    assert report(api_client, task_id, lease, {"fraction": 0.1}).status_code == 404
    got = task(task_id)
    assert got["state"] == "done"
    assert (got["progress"]["fraction"], got["progress"]["message"]) == (1, "all rows")
    assert got["checkpoint"] == {"row": 1000}


# -- the last checkpoint comes back with every redelivery ---------------------------------------


@no_backoff
def test_redelivery__after_a_nack__carries_the_checkpoint(api_client, held, claim) -> None:
    task_id, lease, _ = held
    assert report(api_client, task_id, lease, {"checkpoint": {"row": 500}}).status_code == 200
    assert (
        post(api_client, f"/jobs/{task_id}/nack?lease_id={lease}", {"error": "x"}).status_code
        == 204
    )
    queue.promote_delayed()
    again = claim()
    assert again["task"]["id"] == task_id
    assert (again["task"]["attempts"], again["task"]["checkpoint"]) == (2, {"row": 500})


def test_redelivery__after_a_lapsed_lease__carries_the_checkpoint(
    api_client, enqueue, claim, clock
) -> None:
    task_id = enqueue()
    lease = claim(lease_ms=1000)["lease_id"]
    assert report(api_client, task_id, lease, {"checkpoint": "page 7"}).status_code == 200
    clock.advance(1_001)
    assert queue.reclaim_expired() == 1
    clock.advance(60_000)  # past the retry backoff
    queue.promote_delayed()
    again = claim()
    assert (again["task"]["id"], again["task"]["checkpoint"]) == (task_id, "page 7")


def test_redelivery__after_a_dlq_requeue__carries_the_checkpoint(
    api_client, enqueue, claim
) -> None:
    task_id = enqueue(max_attempts=1)
    lease = claim()["lease_id"]
    assert report(api_client, task_id, lease, {"checkpoint": {"step": 3}}).status_code == 200
    assert post(api_client, f"/jobs/{task_id}/nack?lease_id={lease}").status_code == 204
    assert post(api_client, f"/dlq/{task_id}/requeue").status_code == 204
    again = claim()
    assert (again["task"]["id"], again["task"]["attempts"]) == (task_id, 1)
    assert again["task"]["checkpoint"] == {"step": 3}


def test_redelivery__batch_claim__carries_the_checkpoint(api_client, enqueue, claim, take) -> None:
    task_id = enqueue()
    lease = claim()["lease_id"]
    assert report(api_client, task_id, lease, {"checkpoint": [1, 2, 3]}).status_code == 200
    queue.release(int(task_id), lease_id=lease)  # handed back at once (SQS's visibility 0)
    (delivery,) = take(n=5)
    assert (delivery["task"]["id"], delivery["task"]["checkpoint"]) == (task_id, [1, 2, 3])


def test_redelivery__checkpoint_text_as_stored(api_client, held, claim) -> None:
    """The checkpoint goes out as the stored JSON text: big numbers and key order unchanged."""
    task_id, lease, _ = held
    raw = '{"checkpoint": {"z": 1, "a": 12345678901234567890}}'
    r = api_client.post(
        f"/jobs/{task_id}/progress?lease_id={lease}", raw, content_type="application/json"
    )
    assert r.status_code == 200
    queue.release(int(task_id), lease_id=lease)
    again = api_client.get("/jobs/next?wait_ms=0")
    assert b'"checkpoint":{"z":1,"a":12345678901234567890}' in again.content
    assert json.loads(again.content)["task"]["id"] == task_id

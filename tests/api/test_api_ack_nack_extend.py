"""POST /jobs/{id}/ack, /nack and /extend: 204/200, 400, 404, 409, results and error history."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import override_settings

from broker import queue
from tests.api.conftest import assert_ahead, parse_time
from tests.conftest import post

pytestmark = pytest.mark.django_db

# Retries become due at once, so a test can walk a task through all its attempts.
no_backoff = override_settings(BROKER_RETRY_BASE_MS=0, BROKER_RETRY_MAX_MS=0)


@pytest.fixture
def held(enqueue, claim) -> tuple[str, str]:
    """(task id, lease id) of a task handed out now."""
    task_id = enqueue(max_attempts=3)
    body = claim()
    assert body["task"]["id"] == task_id
    return task_id, body["lease_id"]


# -- ack --------------------------------------------------------------------------------------


def test_ack__lease_in_query__204_done(api_client, held, task) -> None:
    task_id, lease = held
    r = post(api_client, f"/jobs/{task_id}/ack?lease_id={lease}")
    assert r.status_code == 204 and r.content == b""
    got = task(task_id)
    assert (got["state"], got["result"], got["attempts"]) == ("done", None, 1)
    assert queue.totals()["acked"] == 1


def test_ack__lease_in_body__204(api_client, held, task) -> None:
    task_id, lease = held
    assert post(api_client, f"/jobs/{task_id}/ack", {"lease_id": lease}).status_code == 204
    assert task(task_id)["state"] == "done"


@pytest.mark.parametrize("result", [None, 0, "ok", [1, [2]], {"rows": 3, "note": "✓\u0000"}])
def test_ack__result__kept_on_the_task(api_client, held, task, result: Any) -> None:
    task_id, lease = held
    r = post(api_client, f"/jobs/{task_id}/ack?lease_id={lease}", {"result": result})
    assert r.status_code == 204
    assert task(task_id)["result"] == result


def test_ack__missing_lease_id__400(api_client, held, task) -> None:
    task_id, _ = held
    r = post(api_client, f"/jobs/{task_id}/ack", {"result": 1})
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["lease_id"]
    assert task(task_id)["state"] == "handed_out"


def test_ack__other_lease__409(api_client, held, task) -> None:
    task_id, _ = held
    r = post(api_client, f"/jobs/{task_id}/ack?lease_id=someone-else")
    assert r.status_code == 409
    assert r.json()["error"]
    assert task(task_id)["state"] == "handed_out"


@pytest.mark.parametrize("task_id", ["987654", "abc", "0", "-1", "1.0"])
def test_ack__unknown_task__404(api_client, task_id: str) -> None:
    r = post(api_client, f"/jobs/{task_id}/ack?lease_id=x")
    assert r.status_code == 404
    assert r.json()["error"]


def test_ack__task_not_handed_out__404(api_client, enqueue) -> None:
    task_id = enqueue()
    assert post(api_client, f"/jobs/{task_id}/ack?lease_id=x").status_code == 404


def test_ack__twice__second_404(api_client, held) -> None:
    task_id, lease = held
    assert post(api_client, f"/jobs/{task_id}/ack?lease_id={lease}").status_code == 204
    assert post(api_client, f"/jobs/{task_id}/ack?lease_id={lease}").status_code == 404


def test_ack__unknown_body_field__400(api_client, held) -> None:
    task_id, lease = held
    r = post(api_client, f"/jobs/{task_id}/ack?lease_id={lease}", {"reslt": 1})
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["reslt"]


def test_ack__invalid_json_body__400(api_client, held) -> None:
    task_id, lease = held
    r = api_client.post(
        f"/jobs/{task_id}/ack?lease_id={lease}", b"{nope", content_type="application/json"
    )
    assert r.status_code == 400
    assert r.json()["error"]


def test_ack__result_nested_too_deep__400_never_500(api_client, enqueue, claim, task) -> None:
    task_id = enqueue()
    lease = claim()["lease_id"]
    for depth in (300, 905):
        body = '{"result": ' + "[" * depth + "]" * depth + "}"
        r = api_client.post(
            f"/jobs/{task_id}/ack?lease_id={lease}", body, content_type="application/json"
        )
        assert r.status_code == 400
    assert task(task_id)["state"] == "handed_out"


@pytest.mark.parametrize("action", ["ack", "nack", "extend"])
def test_settle__lease_id_with_nul__400_not_503(api_client, held, task, action: str) -> None:
    task_id, _ = held
    r = post(api_client, f"/jobs/{task_id}/{action}?lease_id=a%00b")
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["lease_id"]
    assert task(task_id)["state"] == "handed_out"


# -- nack -------------------------------------------------------------------------------------


def test_nack__attempts_left__204_delayed_with_backoff(api_client, held, task) -> None:
    task_id, lease = held
    before = datetime.now(UTC)
    r = post(api_client, f"/jobs/{task_id}/nack?lease_id={lease}", {"error": "disk full"})
    after = datetime.now(UTC)
    assert r.status_code == 204 and r.content == b""
    got = task(task_id)
    assert (got["state"], got["attempts"], got["last_error"]) == ("delayed", 1, "disk full")
    assert [(e["attempt"], e["error"]) for e in got["errors"]] == [(1, "disk full")]
    parse_time(got["errors"][0]["at"])
    assert_ahead(got["available_at"], before, after, 500, 1000)
    totals = queue.totals()
    assert (totals["nacked"], totals["retried"], totals["buried"]) == (1, 1, 0)


def test_nack__lease_in_body__204(api_client, held, task) -> None:
    task_id, lease = held
    r = post(api_client, f"/jobs/{task_id}/nack", {"lease_id": lease, "error": "x"})
    assert r.status_code == 204
    assert task(task_id)["state"] == "delayed"


@no_backoff
def test_nack__every_attempt__each_error_kept_then_dead(api_client, enqueue, claim, task) -> None:
    task_id = enqueue(max_attempts=3)
    for n in (1, 2, 3):
        queue.promote_delayed()
        lease = claim()["lease_id"]
        r = post(api_client, f"/jobs/{task_id}/nack?lease_id={lease}", {"error": f"try {n}"})
        assert r.status_code == 204
    got = task(task_id)
    assert (got["state"], got["attempts"], got["last_error"]) == ("dead", 3, "try 3")
    assert [(e["attempt"], e["error"]) for e in got["errors"]] == [
        (1, "try 1"),
        (2, "try 2"),
        (3, "try 3"),
    ]
    totals = queue.totals()
    assert (totals["nacked"], totals["retried"], totals["buried"]) == (3, 2, 1)


def test_nack__no_body__204_and_an_error_is_recorded(api_client, held, task) -> None:
    task_id, lease = held
    assert post(api_client, f"/jobs/{task_id}/nack?lease_id={lease}").status_code == 204
    assert task(task_id)["errors"][0]["error"]


def test_nack__error_with_nul__204_kept_with_replacement_char(api_client, held, task) -> None:
    task_id, lease = held
    r = post(api_client, f"/jobs/{task_id}/nack?lease_id={lease}", {"error": "bad\u0000byte"})
    assert r.status_code == 204
    assert task(task_id)["last_error"] == "bad\ufffdbyte"


@pytest.mark.parametrize("error", [3, ["x"], {"m": 1}, True])
def test_nack__error_not_a_string__400(api_client, held, task, error: Any) -> None:
    task_id, lease = held
    r = post(api_client, f"/jobs/{task_id}/nack?lease_id={lease}", {"error": error})
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["error"]
    assert task(task_id)["state"] == "handed_out"


def test_nack__missing_lease_id__400(api_client, held) -> None:
    task_id, _ = held
    r = post(api_client, f"/jobs/{task_id}/nack", {"error": "x"})
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["lease_id"]


def test_nack__other_lease__409(api_client, held, task) -> None:
    task_id, _ = held
    assert post(api_client, f"/jobs/{task_id}/nack?lease_id=other").status_code == 409
    assert task(task_id)["errors"] == []


def test_nack__unknown_or_not_handed_out__404(api_client, enqueue) -> None:
    assert post(api_client, "/jobs/987654/nack?lease_id=x").status_code == 404
    assert post(api_client, f"/jobs/{enqueue()}/nack?lease_id=x").status_code == 404


# -- extend -----------------------------------------------------------------------------------


def test_extend__lease_ms__200_new_deadline(api_client, held, task) -> None:
    task_id, lease = held
    before = datetime.now(UTC)
    r = post(api_client, f"/jobs/{task_id}/extend?lease_id={lease}&lease_ms=90000")
    after = datetime.now(UTC)
    assert r.status_code == 200
    body = r.json()
    assert list(body) == ["deadline"]
    assert_ahead(body["deadline"], before, after, 90_000, 90_000)
    assert task(task_id)["lease_deadline"] == body["deadline"]


def test_extend__default_and_cap(api_client, held) -> None:
    task_id, lease = held
    before = datetime.now(UTC)
    default = post(api_client, f"/jobs/{task_id}/extend?lease_id={lease}").json()
    capped = post(api_client, f"/jobs/{task_id}/extend?lease_id={lease}&lease_ms=9999999").json()
    after = datetime.now(UTC)
    assert_ahead(default["deadline"], before, after, 30_000, 30_000)
    assert_ahead(capped["deadline"], before, after, 300_000, 300_000)


def test_extend__lease_in_body__200(api_client, held) -> None:
    task_id, lease = held
    r = post(api_client, f"/jobs/{task_id}/extend", {"lease_id": lease, "lease_ms": 5000})
    assert r.status_code == 200


@pytest.mark.parametrize(
    "query", ["lease_ms=0", "lease_ms=-5", "lease_ms=1.5", "lease_ms=soon", "lease_ms="]
)
def test_extend__bad_lease_ms__400(api_client, held, query: str) -> None:
    task_id, lease = held
    r = post(api_client, f"/jobs/{task_id}/extend?lease_id={lease}&{query}")
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["lease_ms"]


def test_extend__missing_lease_id__400(api_client, held) -> None:
    task_id, _ = held
    assert post(api_client, f"/jobs/{task_id}/extend?lease_ms=1000").status_code == 400


def test_extend__other_lease__409(api_client, held) -> None:
    task_id, _ = held
    assert post(api_client, f"/jobs/{task_id}/extend?lease_id=other").status_code == 409


def test_extend__unknown_or_finished__404(api_client, held) -> None:
    task_id, lease = held
    assert post(api_client, f"/jobs/987654/extend?lease_id={lease}").status_code == 404
    post(api_client, f"/jobs/{task_id}/ack?lease_id={lease}")
    assert post(api_client, f"/jobs/{task_id}/extend?lease_id={lease}").status_code == 404

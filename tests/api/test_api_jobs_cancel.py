"""DELETE /jobs/{id} cancels a ready, delayed or handed-out task; a finished one answers 409."""

from __future__ import annotations

import pytest

from broker import queue
from tests.conftest import post

pytestmark = pytest.mark.django_db


def totals(api_client) -> dict[str, int]:
    return api_client.get("/stats").json()["totals"]


@pytest.mark.parametrize("state", ["ready", "delayed", "handed_out"])
def test_cancel__live_task__204_cancelled_and_counted(
    api_client, enqueue, claim, task, state: str
) -> None:
    pk = enqueue(delay_ms=60_000 if state == "delayed" else 0)
    if state == "handed_out":
        claim()
    assert task(pk)["state"] == state
    before = totals(api_client)["cancelled"]

    r = api_client.delete(f"/jobs/{pk}")

    assert r.status_code == 204
    assert r.content == b""
    shown = task(pk)
    assert (shown["state"], shown["worker"], shown["lease_deadline"]) == ("cancelled", None, None)
    stats = api_client.get("/stats").json()
    assert stats["totals"]["cancelled"] == before + 1
    assert stats[state] == 0  # the gauge it left


def test_cancel__handed_out__old_lease_ack_nack_extend__404(api_client, enqueue, claim) -> None:
    pk = enqueue()
    lease = claim()["lease_id"]
    assert api_client.delete(f"/jobs/{pk}").status_code == 204
    for verb in ("ack", "nack", "extend"):
        r = post(api_client, f"/jobs/{pk}/{verb}?lease_id={lease}")
        assert r.status_code == 404, verb
        assert r.json()["error"]
    assert totals(api_client)["acked"] == totals(api_client)["nacked"] == 0


def test_cancel__ready_task__is_never_handed_out(api_client, enqueue, claim_nothing) -> None:
    pk = enqueue()
    api_client.delete(f"/jobs/{pk}")
    claim_nothing()


def test_cancel__delayed_task__is_not_promoted(api_client, enqueue, claim_nothing) -> None:
    pk = enqueue(delay_ms=1)
    api_client.delete(f"/jobs/{pk}")
    assert queue.promote_delayed() == 0
    claim_nothing()


def finish(api_client, enqueue, claim, how: str) -> str:
    pk = enqueue(max_attempts=1)
    if how == "cancelled":
        api_client.delete(f"/jobs/{pk}")
        return pk
    d = claim()
    post(api_client, f"/jobs/{pk}/{'ack' if how == 'done' else 'nack'}?lease_id={d['lease_id']}")
    return pk


@pytest.mark.parametrize("how", ["done", "dead", "cancelled"])
def test_cancel__finished__409_and_nothing_moves(
    api_client, enqueue, claim, task, how: str
) -> None:
    pk = finish(api_client, enqueue, claim, how)
    assert task(pk)["state"] == how
    before = totals(api_client)

    r = api_client.delete(f"/jobs/{pk}")

    assert r.status_code == 409
    assert how in r.json()["error"]
    assert task(pk)["state"] == how
    assert totals(api_client) == before


@pytest.mark.parametrize("path", ["/jobs/424242", "/jobs/x1"])
def test_cancel__unknown__404(api_client, path: str) -> None:
    r = api_client.delete(path)
    assert r.status_code == 404
    assert r.json()["error"]


def test_cancel__dead_task_requeued__cancellable_again(api_client, enqueue, claim, task) -> None:
    pk = finish(api_client, enqueue, claim, "dead")
    assert post(api_client, f"/dlq/{pk}/requeue").status_code == 204
    assert api_client.delete(f"/jobs/{pk}").status_code == 204
    assert task(pk)["state"] == "cancelled"

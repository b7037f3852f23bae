"""Admin's Approvals page: the tasks waiting for the event `approval`, Approve and Reject with a
note; a click posts the event (data approved, by, note) and admin's log records it; deciding
needs its own permission, and a POST without CSRF is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client

from broker.models import Task
from tests.conftest import post

pytestmark = pytest.mark.django_db

URL = "/admin/broker/approval/"


def _waiting(api_client: Any, key: str, **body: Any) -> str:
    body = {"payload": {"doc": key}, "wait_for": {"event": "approval", "key": key}, **body}
    r = post(api_client, "/jobs", body)
    assert r.status_code == 201, r.content
    return r.json()["id"]


def test_approvals__lists_tasks_waiting_for_approval_only(admin_client, api_client) -> None:
    pk = _waiting(api_client, "doc-7", queue="reviews")
    other = post(
        api_client, "/jobs", {"payload": 1, "wait_for": {"event": "paid", "key": "doc-7"}}
    ).json()["id"]
    page = admin_client.get(URL).content.decode()
    assert f"/admin/broker/task/{pk}/change/" in page
    assert f"/admin/broker/task/{other}/change/" not in page
    assert "reviews" in page and "doc-7" in page
    assert f'form="decide-{pk}"' in page and f'id="decide-{pk}"' in page
    assert "Approve" in page and "Reject" in page


def test_approve__posts_the_event__releases__logged(admin_client, api_client) -> None:
    pk = _waiting(api_client, "doc-8")
    r = admin_client.post(f"{URL}{pk}/decide/", {"decision": "approve", "note": "looks good"})
    assert r.status_code == 302
    task = api_client.get(f"/jobs/{pk}").json()
    assert task["state"] == "ready"
    assert task["event"]["name"] == "approval" and task["event"]["key"] == "doc-8"
    assert task["event"]["data"] == {"approved": True, "by": "admin", "note": "looks good"}
    entry = LogEntry.objects.get(object_id=pk)
    assert "Approved" in entry.get_change_message() and "looks good" in entry.get_change_message()
    assert f'id="decide-{pk}"' not in admin_client.get(URL).content.decode()
    # Decided already: nothing more is sent.
    admin_client.post(f"{URL}{pk}/decide/", {"decision": "reject"})
    assert api_client.get("/stats").json()["totals"]["events"] == 1


def test_reject__data_approved_false(admin_client, api_client) -> None:
    pk = _waiting(api_client, "doc-9")
    admin_client.post(f"{URL}{pk}/decide/", {"decision": "reject"})
    data = api_client.get(f"/jobs/{pk}").json()["event"]["data"]
    assert data == {"approved": False, "by": "admin", "note": ""}


def test_decide__needs_its_permission__view_alone_is_not_enough(user_with, api_client) -> None:
    pk = _waiting(api_client, "doc-10")
    viewer = user_with("view_approval")
    assert viewer.get(URL).status_code == 200
    assert viewer.post(f"{URL}{pk}/decide/", {"decision": "approve"}).status_code == 403
    assert user_with("view_task").get(URL).status_code == 403
    decider = user_with("decide_approval")
    assert decider.get(URL).status_code == 200
    assert decider.post(f"{URL}{pk}/decide/", {"decision": "approve"}).status_code == 302
    assert Task.objects.get(pk=pk).state == "ready"


def test_decide__without_csrf_token__refused(admin_user, api_client) -> None:
    pk = _waiting(api_client, "doc-11")
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    assert client.post(f"{URL}{pk}/decide/", {"decision": "approve"}).status_code == 403
    assert Task.objects.get(pk=pk).state == "blocked"
    assert client.get(f"{URL}{pk}/decide/").status_code == 405
    assert json.loads(client.get(f"{URL}{pk}/decide/").content)["error"]


def test_decide__workflow_step__the_next_step_runs_after(admin_client, api_client) -> None:
    r = post(api_client, "/workflows", {"name": "publish", "steps": [
        {"ref": "review", "job": {"payload": 1,
                                  "wait_for": {"event": "approval", "key": "post-1"}}},
        {"ref": "publish", "job": {"payload": 2}, "after": ["review"]},
    ]})  # fmt: skip
    review, publish = r.json()["tasks"]["review"], r.json()["tasks"]["publish"]
    page = admin_client.get(URL).content.decode()
    assert f"/admin/broker/workflow/{r.json()['id']}/change/" in page
    admin_client.post(f"{URL}{review}/decide/", {"decision": "approve"})
    assert Task.objects.get(pk=publish).state == "blocked"
    held = api_client.get("/jobs/next", {"wait_ms": 0}).json()
    assert held["task"]["id"] == review and held["task"]["event"]["data"]["approved"] is True
    assert post(api_client, f"/jobs/{review}/ack?lease_id={held['lease_id']}").status_code == 204
    assert Task.objects.get(pk=publish).state == "ready"


def test_workflow_graph__a_step_waiting_for_its_event_says_so(admin_client, api_client) -> None:
    r = post(api_client, "/workflows", {"name": "g", "steps": [
        {"ref": "ask", "job": {"payload": 1, "wait_for": {"event": "approval", "key": "g-1"}}},
        {"ref": "go", "job": {"payload": 2}, "after": ["ask"]},
    ]})  # fmt: skip
    nodes = admin_client.get(f"/admin/broker/workflow/{r.json()['id']}/graph.json").json()["nodes"]
    assert [n["label"] for n in nodes] == ["blocked, waits for approval", "blocked"]

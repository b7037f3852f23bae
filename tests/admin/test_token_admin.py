"""Admin for access tokens (list, add with the secret shown once, revoke), and admin's log of
every admin action on tasks, queues, schedules, types and tokens, with who did it."""

from __future__ import annotations

import hashlib
import re

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.test import Client
from rest_framework.test import APIClient

from broker.models import AccessToken, Task
from broker.tokens import making

pytestmark = pytest.mark.django_db

TOKENS = "/admin/broker/accesstoken/"


def test_token_add__secret_shown_once__only_its_hash_kept(admin_client: Client) -> None:
    r = admin_client.post(
        f"{TOKENS}add/",
        {"name": "tenant-a", "grants_text": "produce+consume:tenant-a.*\nread:*",
         "expires_at_0": "", "expires_at_1": ""},
        follow=True,
    )  # fmt: skip
    assert r.status_code == 200
    shown = re.findall(r"bq_[0-9a-f]{8}_[A-Za-z0-9_-]{43}", r.content.decode())
    assert len(shown) == 1
    row = AccessToken.objects.get(name="tenant-a")
    assert row.secret_hash == hashlib.sha256(shown[0].encode()).hexdigest()
    assert row.grants == ["produce+consume:tenant-a.*", "read:*"]
    # Never again: not on the list, not on its page.
    for url in (TOKENS, f"{TOKENS}{row.pk}/change/"):
        assert shown[0] not in admin_client.get(url).content.decode()
    headers = {"Authorization": f"Bearer {shown[0]}"}
    assert APIClient().get("/stats", headers=headers).status_code == 200
    assert LogEntry.objects.filter(object_id=str(row.pk), action_flag=1).exists()


def test_token_add__bad_grant__error_nothing_made(admin_client: Client) -> None:
    r = admin_client.post(f"{TOKENS}add/", {"name": "x", "grants_text": "steal:*"})
    assert r.status_code == 200 and b"actions are produce" in r.content
    assert not AccessToken.objects.exists()


def test_token_list__columns_and_revoke_logged(admin_client: Client) -> None:
    secret = making.make("ops", ["read:*"]).secret
    headers = {"Authorization": f"Bearer {secret}"}
    assert APIClient().get("/stats", headers=headers).status_code == 200
    page = admin_client.get(TOKENS).content.decode()
    for shown in ("ops", secret[3:11], "read:*", "active"):
        assert shown in page
    row = AccessToken.objects.get(name="ops")
    r = admin_client.post(TOKENS, {"action": "revoke_selected", "_selected_action": [row.pk]})
    assert r.status_code == 302
    assert APIClient().get("/stats", headers=headers).status_code == 401
    entry = LogEntry.objects.get(object_id=str(row.pk), action_flag=CHANGE)
    assert (entry.user.username, entry.change_message) == ("admin", "Revoke selected tokens.")


def test_admin_actions__logged_with_the_user(admin_client: Client, dead) -> None:
    (task,) = dead(1)
    admin_client.post(
        "/admin/broker/deadtask/", {"action": "requeue_selected", "_selected_action": [task]}
    )
    assert Task.objects.get(pk=task).state == "ready"
    admin_client.post(
        "/admin/broker/task/", {"action": "cancel_selected", "_selected_action": [task]}
    )
    admin_client.post("/admin/broker/queue/add/", {"name": "mail", "paused": "on"})
    admin_client.post(
        "/admin/broker/queue/", {"action": "resume_selected", "_selected_action": ["mail"]}
    )
    logged = {
        (e.content_type.model, e.object_id, e.get_change_message())
        for e in LogEntry.objects.filter(user__username="admin")
    }
    assert ("deadtask", str(task), "Requeue selected.") in logged
    assert ("task", str(task), "Cancel selected.") in logged
    assert ("queue", "mail", "Resume selected queues.") in logged

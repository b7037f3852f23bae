"""`key` over the API: validation, shown and filtered, the queue settings, `waiting`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import post

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("key", ["", "x" * 129, "a\x00b", 7, True, ["k"], {"k": 1}, "\ud800"])
def test_post__bad_key__400_naming_it(api_client, key: Any) -> None:
    r = post(api_client, "/jobs", {"payload": 1, "key": key})
    assert r.status_code == 400, r.content
    assert list(r.json()["fields"]) == ["key"]


def test_post__key__shown_delivered_and_filtered(api_client) -> None:
    ids = [post(api_client, "/jobs", {"payload": i, "key": k}).json()["id"]
           for i, k in enumerate(["acct-1", "x" * 128, None, "acct-1"])]  # fmt: skip
    assert api_client.get(f"/jobs/{ids[1]}").json()["key"] == "x" * 128
    assert api_client.get(f"/jobs/{ids[2]}").json()["key"] is None
    listed = api_client.get("/jobs", {"key": "acct-1"}).json()["results"]
    assert [t["id"] for t in listed] == [ids[3], ids[0]]
    assert api_client.get("/jobs", {"key": "y" * 200}).status_code == 400
    d = api_client.get("/jobs/next", {"wait_ms": 0}).json()
    assert d["task"]["key"] == "acct-1"
    batch = post(api_client, "/jobs/batch", {"jobs": [{"payload": 1, "key": "b"}, {"payload": 2}]})
    assert [api_client.get(f"/jobs/{i}").json()["key"] for i in batch.json()["ids"]] == ["b", None]


def test_patch_queue__key_settings__shown_and_null_clears_the_cap(api_client) -> None:
    body = {"fair": True, "key_max_in_flight": 3, "ordered": True}
    r = api_client.patch("/queues/tenants", body, format="json")
    assert r.status_code == 200
    assert {k: r.json()[k] for k in body} == body
    r = api_client.patch("/queues/tenants", {"key_max_in_flight": None}, format="json")
    assert r.json()["key_max_in_flight"] is None
    r = api_client.patch("/queues/tenants", {"ordered": None}, format="json")
    assert (r.status_code, list(r.json()["fields"])) == (400, ["ordered"])


def test_waiting__ordered_key_busy_behind_its_earlier_task(api_client) -> None:
    api_client.patch("/queues/ledger", {"ordered": True}, format="json")
    first = post(api_client, "/jobs", {"payload": 1, "key": "acct", "queue": "ledger"}).json()["id"]
    second = post(api_client, "/jobs", {"payload": 2, "key": "acct", "queue": "ledger"}).json()[
        "id"
    ]
    body = api_client.get(f"/jobs/{second}").json()
    assert body["state"] == "ready"
    assert body["waiting"]["reason"] == "key_busy"
    assert body["waiting"]["behind"] == first
    assert api_client.get("/stats").json()["ready"] == 2  # waiting its turn is still ready

"""A query parameter given empty (`?key=`) is a bad value like any other: 400 naming it, on every
list filter of every endpoint, never read as "no filter" (which listed every task)."""

from __future__ import annotations

import pytest

from broker import queue
from broker.api.parsing import GIVEN_EMPTY
from broker.queue import NewTask

pytestmark = pytest.mark.django_db

LISTS = {
    "/jobs": ("state", "queue", "type", "workflow", "key", "cursor", "limit"),
    "/dlq": ("queue", "type", "cursor", "limit"),
    "/workflows": ("state", "name", "cursor", "limit"),
    "/stats/history": ("queue", "since", "until", "step"),
}
CASES = [(path, name) for path, names in LISTS.items() for name in names]


@pytest.mark.parametrize(("path", "name"), CASES)
def test_list__filter_given_empty__400_naming_it(api_client, path: str, name: str) -> None:
    queue.enqueue(NewTask(payload="{}", queue="mail", key="acme"))

    r = api_client.get(f"{path}?{name}=")

    assert r.status_code == 400, r.content
    body = r.json()
    assert list(body["fields"]) == [name]
    assert body["error"]


@pytest.mark.parametrize("name", ["state", "queue", "type", "workflow", "key", "cursor"])
def test_list_jobs__text_filter_given_empty__says_so(api_client, name: str) -> None:
    r = api_client.get(f"/jobs?{name}=&limit=5")

    assert r.status_code == 400
    assert r.json()["fields"] == {name: [GIVEN_EMPTY]}


def test_list_jobs__filter_given__still_filters(api_client) -> None:
    queue.enqueue(NewTask(payload="{}", queue="mail", key="acme"))
    queue.enqueue(NewTask(payload="{}", queue="mail", key="other"))

    r = api_client.get("/jobs?key=acme&queue=mail")

    assert r.status_code == 200
    assert [t["key"] for t in r.json()["results"]] == ["acme"]

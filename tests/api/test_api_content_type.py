"""Request bodies are JSON: a form, multipart or text/plain body gets 415 and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from broker import queue
from broker.models import Task

pytestmark = pytest.mark.django_db

FORM = "application/x-www-form-urlencoded"
NOT_JSON = [
    FORM,
    "multipart/form-data; boundary=BoUnDaRy",
    "text/plain",  # what a cross-site fetch() with a string body sends
    "text/plain;charset=UTF-8",
    "application/xml",
    "application/jsonp",
    "application/x-json-ish",
]
JSON_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "Application/JSON",
    "application/vnd.api+json",
    "application/merge-patch+json; charset=utf-8",
]


def _raw_post(client: APIClient, url: str, body: bytes, content_type: str | None) -> Any:
    if content_type is None:  # as curl --data-binary @f -H 'Content-Type:' would send it
        return client.generic("POST", url, body, content_type="", CONTENT_TYPE="")
    return client.generic("POST", url, body, content_type=content_type)


def _assert_415(response: Any) -> None:
    assert response.status_code == 415, (response.status_code, response.content)
    assert response["Content-Type"].startswith("application/json")
    assert "JSON" in response.json()["error"]


def _nothing_enqueued() -> None:
    assert Task.objects.count() == 0
    assert queue.totals()["enqueued"] == 0


def test_enqueue__html_form_fields__415_nothing_enqueued(api_client: APIClient) -> None:
    # What <form method=post action="http://broker:8080/jobs"><input name=payload> sends.
    response = api_client.post("/jobs", {"payload": "from a web page"}, format="multipart")
    _assert_415(response)
    response = _raw_post(api_client, "/jobs", b"payload=from+a+web+page", FORM)
    _assert_415(response)
    _nothing_enqueued()


@pytest.mark.parametrize("content_type", NOT_JSON)
def test_enqueue__json_text_under_a_non_json_type__415_nothing_enqueued(
    api_client: APIClient, content_type: str
) -> None:
    response = _raw_post(api_client, "/jobs", b'{"payload": {"x": 1}}', content_type)
    _assert_415(response)
    _nothing_enqueued()


@pytest.mark.parametrize("content_type", [*JSON_TYPES, None])
def test_enqueue__json_type_or_none__201(
    api_client: APIClient, content_type: str | None, task: Callable[[str], dict]
) -> None:
    response = _raw_post(api_client, "/jobs", b'{"payload": {"x": 1}}', content_type)
    assert response.status_code == 201, response.content
    assert task(response.json()["id"])["payload"] == {"x": 1}


@pytest.mark.parametrize(
    ("path", "body"),
    [("/jobs/batch", {"jobs": [{"payload": 1}]}), ("/jobs/claim", {"max": 1, "wait_ms": 0})],
)
@pytest.mark.parametrize("content_type", [FORM, "text/plain", "multipart/form-data; boundary=b"])
def test_batch_enqueue_and_claim__non_json_type__415_nothing_moves(
    api_client: APIClient, enqueue: Callable[..., str], path: str, body: dict, content_type: str
) -> None:
    waiting = enqueue()
    response = _raw_post(api_client, path, json.dumps(body).encode(), content_type)
    _assert_415(response)
    assert Task.objects.get(pk=waiting).state == "ready"
    assert (queue.totals()["enqueued"], queue.totals()["delivered"]) == (1, 0)


def test_claim__empty_form_post__415_no_task_handed_out(
    api_client: APIClient, enqueue: Callable[..., str]
) -> None:
    # A field-less HTML form posts an empty urlencoded body: it must not burn an attempt.
    waiting = enqueue()
    _assert_415(_raw_post(api_client, "/jobs/claim", b"", FORM))
    assert Task.objects.get(pk=waiting).state == "ready"


def _held(task_id: str, lease_id: str) -> dict:
    return {"id": task_id, "lease_id": lease_id}


SETTLES = [
    *[
        pytest.param(f"/jobs/{{id}}/{action}?lease_id={{lease}}", lambda i, le, b=body: b, ct,
                     id=f"{action}-{ct}")
        for action, body in [("ack", {"result": 1}), ("nack", {"error": "x"}),
                             ("extend", {"lease_ms": 1000})]
        for ct in (FORM, "text/plain")
    ],
    pytest.param("/jobs/ack", lambda i, le: {"acks": [_held(i, le)]}, FORM, id="batch-ack"),
    pytest.param("/jobs/nack", lambda i, le: {"nacks": [_held(i, le)]}, FORM, id="batch-nack"),
]  # fmt: skip


@pytest.mark.parametrize(("url", "body", "content_type"), SETTLES)
def test_settle__non_json_type__415_task_still_held(
    api_client: APIClient,
    enqueue: Callable[..., str],
    claim: Callable[..., dict],
    task: Callable[[str], dict],
    url: str,
    body: Callable[[str, str], dict],
    content_type: str,
) -> None:
    task_id = enqueue()
    held = claim()
    raw = json.dumps(body(task_id, held["lease_id"])).encode()
    _assert_415(
        _raw_post(api_client, url.format(id=task_id, lease=held["lease_id"]), raw, content_type)
    )
    shown = task(task_id)
    assert (shown["state"], shown["lease_deadline"]) == ("handed_out", held["deadline"])


def test_ack__no_body_no_type__204(
    api_client: APIClient, enqueue: Callable[..., str], claim: Callable[..., dict]
) -> None:
    task_id = enqueue()
    lease = claim()["lease_id"]
    response = _raw_post(api_client, f"/jobs/{task_id}/ack?lease_id={lease}", b"", None)
    assert response.status_code == 204, response.content


@pytest.mark.parametrize("content_type", [FORM, "text/plain", "multipart/form-data; boundary=b"])
def test_requeue_and_cancel__non_json_type__415_nothing_moves(
    api_client: APIClient, enqueue: Callable[..., str], content_type: str
) -> None:
    # They read no body, but a page's form (or an empty one) must not move a task by id either.
    dead, waiting = enqueue(max_attempts=1), enqueue()
    queue.nack(int(dead), lease_id=queue.claim(None, 1000)[0].lease_id, error="x")
    assert Task.objects.get(pk=dead).state == "dead"
    for body in (b"", b"x=1"):
        _assert_415(_raw_post(api_client, f"/dlq/{dead}/requeue", body, content_type))
        response = api_client.generic("DELETE", f"/jobs/{waiting}", body, content_type=content_type)
        _assert_415(response)
    assert (Task.objects.get(pk=dead).state, Task.objects.get(pk=waiting).state) == (
        "dead",
        "ready",
    )
    assert _raw_post(api_client, f"/dlq/{dead}/requeue", b"", None).status_code == 204
    assert api_client.generic("DELETE", f"/jobs/{waiting}", b"", content_type="").status_code == 204


@pytest.mark.parametrize(
    ("method", "path"), [("DELETE", "/schedules/s"), ("DELETE", "/workflows/1")]
)
def test_other_deletes__form_type__415(api_client: APIClient, method: str, path: str) -> None:
    _assert_415(api_client.generic(method, path, b"", content_type=FORM))


def test_method_the_endpoint_lacks__form_type__still_405(api_client: APIClient) -> None:
    response = api_client.generic("POST", "/stats", b"x=1", content_type=FORM)
    assert response.status_code == 405, response.content

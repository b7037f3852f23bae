"""API-test helpers: times as shown, claim/task/queue shortcuts, the SQS endpoint caller."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.conftest import post

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
JSON_1_0 = "application/x-amz-json-1.0"
Sqs = Callable[..., tuple[int, dict[str, Any], Any]]
# A task's keys as a claim hands it out, in order; GET /jobs/{id} shows these and more.
DELIVERED_KEYS = (
    "id payload attempts max_attempts queue priority type key created_at available_at"
    " checkpoint event workflow ref after parents"
).split()


def parse_time(text: str) -> datetime:
    assert TIMESTAMP.match(text), text
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def assert_ahead(text: str, before: datetime, after: datetime, low_ms: int, high_ms: int) -> None:
    """`text`, a time the broker set between `before` and `after` as now + [low_ms, high_ms]."""
    at = parse_time(text)
    # -1 ms: the API shows milliseconds, truncated.
    assert before + timedelta(milliseconds=low_ms - 1) <= at, (at, before)
    assert at <= after + timedelta(milliseconds=high_ms), (at, after)


def _next(client: APIClient, expected: int, params: dict[str, Any]) -> Any:
    params.setdefault("wait_ms", 0)
    headers = params.pop("headers", {})
    r = client.get("/jobs/next", params, headers=headers)
    assert r.status_code == expected, (r.status_code, r.content)
    return r


@pytest.fixture
def claim(api_client: APIClient) -> Callable[..., dict[str, Any]]:
    """claim(headers={...}, **query) → the GET /jobs/next body; fails unless a task came."""
    return lambda **params: _next(api_client, 200, params).json()


@pytest.fixture
def claim_nothing(api_client: APIClient) -> Callable[..., None]:
    """claim_nothing(**query): GET /jobs/next answers 204, no task handed out."""
    return lambda **params: _next(api_client, 204, params) and None


@pytest.fixture
def task(api_client: APIClient) -> Callable[[str], dict[str, Any]]:
    """task(id) → GET /jobs/{id} (200 asserted)."""

    def get(task_id: str) -> dict[str, Any]:
        r = api_client.get(f"/jobs/{task_id}")
        assert r.status_code == 200, r.content
        return r.json()

    return get


# -- queues -------------------------------------------------------------------------------------


def patch(client: APIClient, url: str, body: Any) -> Any:
    return client.patch(url, body, format="json")


@pytest.fixture
def set_queue(api_client: APIClient) -> Callable[..., dict[str, Any]]:
    """set_queue(name, **settings) → the PATCH /queues/{name} answer (200 asserted)."""

    def change(name: str, **settings: Any) -> dict[str, Any]:
        r = patch(api_client, f"/queues/{name}", settings)
        assert r.status_code == 200, r.content
        return r.json()

    return change


@pytest.fixture
def take(api_client: APIClient) -> Callable[..., list[dict[str, Any]]]:
    """take(queues=None, n=1) → the deliveries of POST /jobs/claim with wait_ms 0 ([] on 204)."""

    def claim(queues: list[str] | None = None, n: int = 1) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"max": n, "wait_ms": 0}
        if queues is not None:
            body["queues"] = queues
        r = post(api_client, "/jobs/claim", body)
        if r.status_code == 204:
            return []
        assert r.status_code == 200, r.content
        return r.json()["deliveries"]

    return claim


@pytest.fixture
def put(api_client: APIClient) -> Callable[..., list[str]]:
    """put(queue, n=1, **fields) → ids of n tasks enqueued to `queue` in one batch."""

    def enqueue(queue: str, n: int = 1, **fields: Any) -> list[str]:
        jobs = [{"payload": {"i": i}, "queue": queue, **fields} for i in range(n)]
        r = post(api_client, "/jobs/batch", {"jobs": jobs})
        assert r.status_code == 201, r.content
        return r.json()["ids"]

    return enqueue


def ack_all(client: APIClient, deliveries: list[dict[str, Any]]) -> None:
    acks = [{"id": d["task"]["id"], "lease_id": d["lease_id"]} for d in deliveries]
    r = post(client, "/jobs/ack", {"acks": acks})
    assert r.status_code == 200 and all(x["status"] == 204 for x in r.json()["results"]), r.content


# -- SQS ----------------------------------------------------------------------------------------


@pytest.fixture
def sqs(client: Client) -> Sqs:
    """sqs("SendMessage", {...}, path="/sqs", **headers) as boto3 would send it, unsigned."""

    def call(
        action: str, body: dict[str, Any] | None = None, path: str = "/sqs", **headers: Any
    ) -> tuple[int, dict[str, Any], Any]:
        headers.setdefault("HTTP_X_AMZ_TARGET", f"AmazonSQS.{action}")
        headers.setdefault("content_type", JSON_1_0)
        raw = headers.pop("raw", None)
        data = raw if raw is not None else json.dumps(body or {})
        response = client.post(path, data=data, **headers)
        return response.status_code, json.loads(response.content or b"{}"), response

    return call


@pytest.fixture
def queue_url(sqs: Sqs) -> Callable[..., str]:
    """queue_url(name, **attributes) → the URL of a new SQS queue."""

    def make(name: str = "q", **attributes: str) -> str:
        status, body, _ = sqs("CreateQueue", {"QueueName": name, "Attributes": attributes})
        assert status == 200, body
        url: str = body["QueueUrl"]
        return url

    return make

"""Helpers of the queue-operation tests: JSON calls, enqueue/claim shortcuts, the invariant."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.conftest import assert_invariant, post


@pytest.fixture(autouse=True)
def _invariant_after_each_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """nacked + reclaimed == retried + buried, whatever the test did."""
    yield
    if request.node.get_closest_marker("django_db"):
        assert_invariant()


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

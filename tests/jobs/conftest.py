"""Helpers of the jobs-API tests: JSON posts, enqueue/claim/ack shortcuts, the invariant."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.conftest import assert_invariant, post  # noqa: F401 -- post: shared with the tests here


@pytest.fixture(autouse=True)
def _invariant_after_each_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """nacked + reclaimed == retried + buried, whatever the test did."""
    yield
    if request.node.get_closest_marker("django_db"):
        assert_invariant()


@pytest.fixture
def claim(api_client: APIClient) -> Callable[..., dict[str, Any] | None]:
    """claim(**query) → the GET /jobs/next body, or None on 204."""

    def take(**params: Any) -> dict[str, Any] | None:
        params.setdefault("wait_ms", 0)
        headers = params.pop("headers", {})
        r = api_client.get("/jobs/next", params, headers=headers)
        if r.status_code == 204:
            return None
        assert r.status_code == 200, (r.status_code, r.content)
        return r.json()

    return take


@pytest.fixture
def task(api_client: APIClient) -> Callable[[str], dict[str, Any]]:
    """task(id) → GET /jobs/{id} (200 asserted)."""

    def get(task_id: str) -> dict[str, Any]:
        r = api_client.get(f"/jobs/{task_id}")
        assert r.status_code == 200, r.content
        return r.json()

    return get

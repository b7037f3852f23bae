"""API-test helpers: JSON posts, enqueue/claim shortcuts, and the invariant after every test."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.conftest import assert_invariant, post  # noqa: F401 -- post: shared with the tests here

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture(autouse=True)
def _invariant_after_each_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """nacked + reclaimed == retried + buried, whatever the test did through the API."""
    yield
    if request.node.get_closest_marker("django_db"):
        assert_invariant()


def parse_time(text: str) -> datetime:
    assert TIMESTAMP.match(text), text
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def assert_ahead(text: str, before: datetime, after: datetime, low_ms: int, high_ms: int) -> None:
    """`text`, a time the broker set between `before` and `after` as now + [low_ms, high_ms]."""
    at = parse_time(text)
    # -1 ms: the API shows milliseconds, truncated.
    assert before + timedelta(milliseconds=low_ms - 1) <= at, (at, before)
    assert at <= after + timedelta(milliseconds=high_ms), (at, after)


@pytest.fixture
def claim(api_client: APIClient) -> Callable[..., dict[str, Any]]:
    """claim(**query) → the GET /jobs/next body; fails unless a task was handed out."""

    def take(**params: Any) -> dict[str, Any]:
        params.setdefault("wait_ms", 0)
        r = api_client.get("/jobs/next", params)
        assert r.status_code == 200, (r.status_code, r.content)
        return r.json()

    return take


@pytest.fixture
def task(api_client: APIClient) -> Callable[[str], dict[str, Any]]:
    """task(id) → GET /jobs/{id}."""

    def get(task_id: str) -> dict[str, Any]:
        r = api_client.get(f"/jobs/{task_id}")
        assert r.status_code == 200, r.content
        return r.json()

    return get

"""Shared fixtures: API client, task factory, database-kind markers."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from broker import queue
from broker.queue import NewTask


def _on_postgres() -> bool:
    return os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_slow = os.environ.get("RUN_SLOW") == "1"
    for item in items:
        if not _on_postgres() and ("postgres" in item.keywords or "e2e" in item.keywords):
            item.add_marker(
                pytest.mark.skip(reason="needs PostgreSQL: DATABASE_URL is not postgres://")
            )
        if "slow" in item.keywords and not run_slow:
            reason = "slow fault test: RUN_SLOW=1 runs it (.ci/run does)"
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


def post(client: Any, url: str, body: Any = None, **extra: Any) -> Any:
    """POST `body` as JSON (no body when None); works with APIClient and django.test.Client."""
    if body is None:
        return client.post(url, **extra)
    return client.post(url, json.dumps(body), content_type="application/json", **extra)


@pytest.fixture
def enqueue(api_client: APIClient) -> Callable[..., str]:
    """enqueue(**body) → the new task's id (201 asserted); payload defaults to {"n": 1}."""

    def make(**body: Any) -> str:
        body.setdefault("payload", {"n": 1})
        r = post(api_client, "/jobs", body)
        assert r.status_code == 201, r.content
        return r.json()["id"]

    return make


@pytest.fixture
def enqueue_task():
    """Make a task through the state machine: enqueue_task(payload=..., **NewTask fields)."""

    def make(payload: Any = None, **fields: Any) -> int:
        from broker.api.parsing import dump_json

        pk, _ = queue.enqueue(NewTask(payload=dump_json(payload or {"n": 1}), **fields))
        return pk

    return make


def assert_invariant() -> None:
    totals = queue.totals()
    assert totals["nacked"] + totals["reclaimed"] == totals["retried"] + totals["buried"], totals


@pytest.fixture
def db_url(transactional_db: None) -> str:
    """A DATABASE_URL naming the test database, for child processes."""
    s = connection.settings_dict
    if connection.vendor == "postgresql":
        host, port = s["HOST"] or "127.0.0.1", s["PORT"] or "5432"
        return f"postgres://{s['USER']}@{host}:{port}/{s['NAME']}"
    return f"sqlite:///{s['NAME']}"


@pytest.fixture(scope="session", autouse=True)
def _stop_wakeup_hub(django_db_setup: None) -> Any:
    """The hub's LISTEN connection must be gone before the test database is dropped."""
    yield
    from broker.wakeup import hub

    hub.stop()


@pytest.fixture(scope="session", autouse=True)
def _claim_log_by_hand() -> Any:
    """In-process tests write claim notes themselves (claim_log.flush()): a thread of its own
    would write them outside the test's transaction, or into the next test."""
    from django.conf import settings

    settings.BROKER_CLAIM_LOG_THREAD = False
    yield


@pytest.fixture(autouse=True)
def _fresh_claim_hints() -> Any:
    """A scope found restricted in one test is a hint only, but it changes the next test's
    query count: each test starts without hints or unwritten claim notes."""
    from broker.claimers import claim_log
    from broker.queue import restricted

    restricted.forget_hints()
    claim_log.reset()
    yield

"""Shared fixtures: API client, task factories, the invariant, clocks, worker fakes, markers."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone as real_timezone
from rest_framework.test import APIClient

from broker import queue
from broker.queue import NewTask
from tests.worker_fakes import FakeBroker, FakeServer, serve, start_server
from workers.client import BrokerClient

# The job types the workers ship, each with a sample payload (contract/jobtypes).
SAMPLE_TYPES = ("data_transform", "fail_job", "http_fetch", "image_resize", "send_email",
                "sleep_job")  # fmt: skip
# The /stats totals, in the contract's order.
COUNTER_NAMES = ("enqueued", "delivered", "acked", "nacked", "reclaimed", "retried", "buried",
                 "requeued", "cancelled")  # fmt: skip


def _on_postgres() -> bool:
    return os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_slow = os.environ.get("RUN_SLOW") == "1"
    for item in items:
        if not _on_postgres() and any(item.get_closest_marker(m) for m in ("postgres", "e2e")):
            item.add_marker(
                pytest.mark.skip(reason="needs PostgreSQL: DATABASE_URL is not postgres://")
            )
        if item.get_closest_marker("slow") and not run_slow:
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


def explain(statement: str, options: str = "", **params: Any) -> str:
    """The plan PostgreSQL makes for a claim statement ("EXPLAIN (options) ..."), its parameters
    placeholders unless given."""
    now = real_timezone.now()
    placeholders = {
        "limit": 1,
        "lease_id": "x" * 32,
        "deadline": now,
        "now": now,
        "worker": None,
        "shard": 0,
        "queues": None,
        "queue": None,
        "scope": None,
        "names": [],
        "lims": [],
    }
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {options} {statement}", {**placeholders, **params})
        return "\n".join(row[0] for row in cursor.fetchall())


def analyze_tasks() -> None:
    """Fresh planner statistics of broker_task."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE broker_task")


def settle(pk: int, lease_id: str, how: str) -> None:
    """Move a handed-out task on by `how`: "ack", "nack" (error "boom") or "cancel"."""
    if how == "ack":
        queue.ack(pk, lease_id=lease_id)
    elif how == "nack":
        queue.nack(pk, lease_id=lease_id, error="boom")
    else:
        assert how == "cancel", how
        queue.cancel(pk)


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


@pytest.fixture(autouse=True)
def _invariant_after_each_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """nacked + reclaimed == retried + buried after every database test, whatever it did."""
    yield
    if request.node.get_closest_marker("django_db"):
        assert_invariant()


class Clock:
    """The state machine's clock, movable: the real time (or a stopped one) plus an offset."""

    def __init__(self, start: datetime | None = None) -> None:
        self.offset = timedelta(0)
        self.start = start

    def now(self) -> datetime:
        return (self.start or real_timezone.now()) + self.offset

    def advance(self, ms: int) -> None:
        self.offset += timedelta(milliseconds=ms)


def _patched_clock(monkeypatch: pytest.MonkeyPatch, c: Clock) -> Clock:
    monkeypatch.setattr(queue.base, "timezone", SimpleNamespace(now=c.now))
    return c


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Time travel for `broker.queue` only: leases expire and backoffs end without sleeping."""
    return _patched_clock(monkeypatch, Clock())


@pytest.fixture
def stopped_clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """`broker.queue`'s clock stopped and moved by hand, so a claim-to-ack duration is exact."""
    return _patched_clock(monkeypatch, Clock(start=real_timezone.now()))


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    """The file the workers' untyped-task handler writes its lines to."""
    return tmp_path / "jobs.log"


# -- the workers' fakes (unit tests of the worker client and runner, runworker children) --------


@pytest.fixture
def fake_broker() -> FakeBroker:
    """A fresh in-memory broker."""
    return FakeBroker()


@pytest.fixture
def http_broker() -> Iterator[FakeServer]:
    """A running fake HTTP broker."""
    server, fake = start_server()
    thread = serve(server)
    yield fake
    fake.release.set()
    server.shutdown()
    thread.join()
    server.server_close()


def factory(
    build: Callable[..., Any], defaults: dict[str, Any], finish: Callable[[Any], Any]
) -> Iterator[Callable[..., Any]]:
    """A fixture's maker: build(*args, **defaults overridden by kwargs); finish(each) after."""
    made: list[Any] = []

    def make(*args: Any, **kwargs: Any) -> Any:
        made.append(build(*args, **{**defaults, **kwargs}))
        return made[-1]

    yield make
    for thing in made:
        finish(thing)


def _cancel_and_close(client: BrokerClient) -> None:
    client.cancel_claims()
    client.close()


@pytest.fixture
def make_client() -> Iterator[Callable[..., BrokerClient]]:
    """Build BrokerClients with fast backoff; all are closed at teardown."""
    fast = {"backoff_base_s": 0.01, "backoff_cap_s": 0.05, "give_up_s": 2.0}
    yield from factory(BrokerClient, fast, _cancel_and_close)


@pytest.fixture
def workers_logger() -> Iterator[logging.Logger]:
    """The "workers" logger, with its level and handlers restored after the test."""
    logger = logging.getLogger("workers")
    level, handlers = logger.level, list(logger.handlers)
    yield logger
    logger.setLevel(level)
    logger.handlers[:] = handlers

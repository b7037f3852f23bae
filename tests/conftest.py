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


def _flush_by_delete() -> None:
    """A transactional test's teardown empties the tables with DELETE, not Django's TRUNCATE.

    On PostgreSQL a TRUNCATE of the 25 tables costs ~0.25 s (each table gets new files, synced
    at commit) where a DELETE of what one test wrote takes a few ms: across the few hundred
    transactional tests that was a tenth of `make test`. DELETE also takes row locks, not an
    exclusive lock per table one after another, which deadlocked with the sweep of a module's
    live sweeper; a deadlock left (rows locked in another order) is run again. Every foreign
    key is deferrable, so one transaction deletes in any order. Content types and permissions
    stay: they are what migrate made, so the post_migrate that Django's flush sends to make
    them again is not needed.
    """
    from django.db import connections, transaction
    from django.test import TransactionTestCase

    truncate = TransactionTestCase._fixture_teardown
    kept = {"django_migrations", "django_content_type", "auth_permission"}

    def deadlocked(exc: BaseException | None) -> bool:
        return exc is not None and ("deadlock detected" in str(exc) or deadlocked(exc.__cause__))

    def empty(self: TransactionTestCase) -> None:
        names = self._databases_names(include_mirrors=False)
        if self.available_apps is not None or any(
            connections[name].vendor != "postgresql" for name in names
        ):
            truncate(self)
            return
        for name in names:
            conn = connections[name]
            tables = sorted(set(conn.introspection.django_table_names(only_existing=True)) - kept)
            if _any_large(conn, tables):
                truncate(self)  # a backlog of many thousand rows: TRUNCATE is the quicker
                return
            with transaction.atomic(using=name), conn.cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL DEFERRED")
                for table in tables:  # Django's own table names, quoted
                    cursor.execute(f"DELETE FROM {conn.ops.quote_name(table)}")  # noqa: S608

    def delete_all(self: TransactionTestCase) -> None:
        for attempt in range(5):
            try:
                empty(self)
                return
            except Exception as exc:
                if not deadlocked(exc) or attempt == 4:
                    raise

    TransactionTestCase._fixture_teardown = delete_all


def _any_large(conn: Any, tables: list[str], rows: int = 5000) -> bool:
    """Whether a table holds over `rows` rows (each count stops there)."""
    checks = " OR ".join(
        f"(SELECT count(*) FROM (SELECT 1 FROM {conn.ops.quote_name(t)} LIMIT {rows + 1}) s)"  # noqa: S608
        f" > {rows}"
        for t in tables
    )
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT {checks}")
        return bool(cursor.fetchone()[0])


_flush_by_delete()


def _static_files_found_once() -> None:
    """WhiteNoise's middleware finds and stats every static file (~180) when it is made: 60 ms
    of CPU. Django's test client makes its middleware anew for each client, so in an API test
    module that was half of all the CPU the tests spent in-process. No test changes the static
    files, so each process finds them once for the settings the middleware was made with."""
    from django.conf import settings
    from whitenoise.middleware import WhiteNoiseMiddleware

    find = WhiteNoiseMiddleware.add_files_from_finders
    found: dict[tuple[Any, ...], dict[str, Any]] = {}

    def add_files_from_finders(self: WhiteNoiseMiddleware) -> None:
        key = (self.static_prefix, self.max_age, self.allow_all_origins, self.charset,
               self.index_file, self.add_headers_function, tuple(settings.INSTALLED_APPS),
               tuple(map(str, settings.STATICFILES_DIRS)))  # fmt: skip
        if key not in found:
            before = set(self.files)
            find(self)
            found[key] = {url: f for url, f in self.files.items() if url not in before}
        self.files.update(found[key])

    WhiteNoiseMiddleware.add_files_from_finders = add_files_from_finders  # type: ignore[method-assign]


_static_files_found_once()

# For users that log in by password in-process: PBKDF2's million rounds cost 0.3-0.5 s of CPU a
# hash and tell those tests nothing (a browser test's gunicorn keeps the default).
QUICK_PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The job types the workers ship, each with a sample payload (contract/jobtypes).
SAMPLE_TYPES = ("batch_import", "data_transform", "fail_job", "http_fetch", "image_resize",
                "merge_results", "order_payment", "send_email", "sleep_job")  # fmt: skip
# The /stats totals, in the contract's order.
COUNTER_NAMES = ("enqueued", "delivered", "acked", "nacked", "reclaimed", "retried", "buried",
                 "requeued", "cancelled", "released", "deduplicated", "suspended",
                 "events")  # fmt: skip


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
            reason = "slow test: make test-slow runs it (.ci/run does)"
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


def _child_db_url() -> str:
    s = connection.settings_dict
    if connection.vendor == "postgresql":
        host, port = s["HOST"] or "127.0.0.1", s["PORT"] or "5432"
        return f"postgres://{s['USER']}@{host}:{port}/{s['NAME']}"
    return f"sqlite:///{s['NAME']}"


@pytest.fixture
def db_url(transactional_db: None) -> str:
    """A DATABASE_URL naming the test database, for child processes."""
    return _child_db_url()


@pytest.fixture(scope="session")
def live_db_url(django_db_setup: None) -> str:
    """db_url for processes that outlive a test (a module's broker): each test still asks for
    `db_url`, whose teardown empties the tables under them."""
    return _child_db_url()


@pytest.fixture
def admin_user(db: None, django_user_model: Any) -> Any:
    """pytest-django's superuser, without a password: `admin_client` logs it in with
    force_login, and hashing one (PBKDF2, a million rounds) cost 0.27 s of CPU a test."""
    return django_user_model.objects.create_superuser("admin", "admin@example.com", None)


@pytest.fixture(scope="session", autouse=True)
def _commits_not_waiting_on_the_disk(django_db_setup: None, django_db_blocker: Any) -> None:
    """The test database's commits return before their WAL reaches the disk.

    These machines' disk stalls an fsync now and then: 8 in 15 s over 30 ms, the worst 264 ms
    (docs/performance.md, "Commit latency"). A wake-up is two commits (the enqueue's and the
    claim's), so the latency tests' p99 followed the disk, not the broker. What a commit makes
    visible, and when, is the same; only a crash of PostgreSQL itself could lose the last
    commits, and no test crashes the PostgreSQL this database lives on (the restart test stops
    it cleanly, which writes everything out; the failover test runs its own servers).
    """
    # No test database when no test selected needs one (pytest-django sets up only those).
    name = connection.settings_dict["NAME"]
    if connection.vendor != "postgresql" or not name.startswith("test_"):
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        quoted = connection.ops.quote_name(name)
        cursor.execute(f"ALTER DATABASE {quoted} SET synchronous_commit = off")
        cursor.execute("SET synchronous_commit = off")


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
def _no_access_tokens_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with an empty database, so with no access token, known fresh: the
    token cache (broker.tokens.auth) asks the database nothing until a token changes in this
    process (its signals say so) — query counts are of the work itself. Tests of the
    revalidation across processes set REFRESH_S back."""
    from broker.tokens import auth

    monkeypatch.setattr(auth, "REFRESH_S", 3600.0)
    auth.assume_no_tokens()


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

"""Service-test helpers: counter deltas, one-task claims, and the invariant after every test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone as real_timezone

from broker import queue
from broker.queue import Delivery
from tests.conftest import assert_invariant


@pytest.fixture(autouse=True)
def _invariant_after_each_test(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if request.node.get_closest_marker("django_db"):
        assert_invariant()


@pytest.fixture
def moved() -> Callable[[], dict[str, int]]:
    """moved() → the counters that changed since the fixture was made, as {name: delta}."""
    before = queue.totals()

    def delta() -> dict[str, int]:
        now = queue.totals()
        return {name: now[name] - before[name] for name in now if now[name] != before[name]}

    return delta


@pytest.fixture
def claim_one() -> Callable[..., Delivery]:
    """claim_one(lease_ms=30000, queues=None) → the one delivery; fails if nothing was ready."""

    def claim(lease_ms: int = 30_000, queues: list[str] | None = None) -> Delivery:
        got = queue.claim(queues, lease_ms)
        assert len(got) == 1, got
        return got[0]

    return claim


class Clock:
    """The state machine's clock, movable: the real time plus an offset tests can advance."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def now(self) -> datetime:
        return real_timezone.now() + self.offset

    def advance(self, ms: int) -> None:
        self.offset += timedelta(milliseconds=ms)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Time travel for `broker.queue` only: leases expire and backoffs end without sleeping."""
    c = Clock()
    monkeypatch.setattr(queue.base, "timezone", SimpleNamespace(now=c.now))
    return c

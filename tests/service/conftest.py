"""Service-test helpers: counter deltas and one-task claims."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker import queue
from broker.queue import Delivery


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

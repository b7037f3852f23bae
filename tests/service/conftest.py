"""Service-test helpers: counter deltas, one-task claims, a nack whose retry is due."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker import queue
from broker.queue import Delivery
from tests.conftest import Clock


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


@pytest.fixture
def nack_retried(claim_one: Callable[..., Delivery], clock: Clock) -> Callable[[int, str], None]:
    """nack_retried(pk, error): claim the next task (pk), nack it, let its backoff pass: ready."""

    def fail_once(pk: int, error: str) -> None:
        queue.nack(pk, lease_id=claim_one().lease_id, error=error)
        clock.advance(60_000)
        queue.promote_delayed()

    return fail_once

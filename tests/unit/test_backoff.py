"""Retry backoff: the k-th retry waits between half and all of min(30 s, 2^(k-1) s)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.states import backoff_ms

BASE_MS, CAP_MS = 1000, 30_000


class FixedRng:
    """uniform(a, b) answers a + fraction * (b - a): the jitter, pinned."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction

    def uniform(self, a: float, b: float) -> float:
        return a + self.fraction * (b - a)


def ceiling_ms(k: int) -> int:
    return min(CAP_MS, 1000 * 2 ** (k - 1))


@pytest.mark.parametrize(
    ("k", "low", "high"),
    [
        (1, 500, 1000),
        (2, 1000, 2000),
        (3, 2000, 4000),
        (4, 4000, 8000),
        (5, 8000, 16_000),
        (6, 15_000, 30_000),
        (7, 15_000, 30_000),
        (100, 15_000, 30_000),
    ],
)
def test_backoff__fixed_rng__hits_both_ends(k: int, low: int, high: int) -> None:
    assert backoff_ms(k, BASE_MS, CAP_MS, FixedRng(0.0)) == low
    assert backoff_ms(k, BASE_MS, CAP_MS, FixedRng(1.0)) == high
    assert backoff_ms(k, BASE_MS, CAP_MS, FixedRng(0.5)) == (low + high) // 2


def test_backoff__seeded_rng__every_k_within_bounds_and_jittered() -> None:
    rng = random.Random(1234)
    for k in range(1, 101):
        delays = {backoff_ms(k, BASE_MS, CAP_MS, rng) for _ in range(20)}
        assert all(ceiling_ms(k) // 2 <= d <= ceiling_ms(k) for d in delays), (k, delays)
        assert len(delays) > 1, f"no jitter at k={k}"


def test_backoff__default_rng__within_bounds() -> None:
    for k in (1, 3, 10):
        assert ceiling_ms(k) // 2 <= backoff_ms(k, BASE_MS, CAP_MS) <= ceiling_ms(k)


@settings(database=None, max_examples=300, deadline=None)
@given(k=st.integers(min_value=1, max_value=100), fraction=st.floats(min_value=0, max_value=1))
def test_backoff__any_k_and_jitter__between_half_and_all_of_capped_base(
    k: int, fraction: float
) -> None:
    delay = backoff_ms(k, BASE_MS, CAP_MS, FixedRng(fraction))
    assert ceiling_ms(k) // 2 <= delay <= ceiling_ms(k)


@settings(database=None, max_examples=200, deadline=None)
@given(
    k=st.integers(min_value=1, max_value=100),
    base=st.integers(min_value=1, max_value=60_000),
    cap=st.integers(min_value=1, max_value=600_000),
)
def test_backoff__any_settings__never_above_cap_nor_below_half(k: int, base: int, cap: int) -> None:
    ceiling = min(cap, base * 2 ** (k - 1))
    assert ceiling // 2 <= backoff_ms(k, base, cap, FixedRng(0.0))
    assert backoff_ms(k, base, cap, FixedRng(1.0)) <= ceiling


def test_backoff__grows_monotonically_until_the_cap() -> None:
    lows = [backoff_ms(k, BASE_MS, CAP_MS, FixedRng(0.0)) for k in range(1, 10)]
    assert lows == sorted(lows)
    assert lows[-1] == CAP_MS // 2


@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 1.0])
def test_backoff__contracts_copy_agrees_with_the_brokers(fraction: float) -> None:
    # contract/backoff.py is where both houses will read it from; until then, one rule.
    from contract.backoff import backoff_ms as contract_backoff_ms

    for k in range(0, 102):
        for base, cap in ((BASE_MS, CAP_MS), (1, 10**12), (7, 7)):
            expected = backoff_ms(k, base, cap, FixedRng(fraction))
            assert contract_backoff_ms(k, base, cap, FixedRng(fraction)) == expected

"""Retry backoff, pure: the broker's retries and the workers' reconnects wait by the same rule."""

from __future__ import annotations

import random
from typing import Protocol


class _Uniform(Protocol):
    def uniform(self, a: float, b: float) -> float: ...


def backoff_ms(attempt: int, base_ms: int, cap_ms: int, rng: _Uniform = random) -> int:
    """Delay before the retry that follows the `attempt`-th failure (equal jitter).

    base = min(cap, base_ms * 2^(attempt-1)); the delay is base/2 + uniform(0, base/2).
    """
    exponent = max(attempt - 1, 0)
    # Cap the exponent before the power: attempt may be up to 100.
    base = cap_ms if exponent >= 62 else min(cap_ms, base_ms * (1 << exponent))
    half = base / 2
    return int(half + rng.uniform(0, half))


def backoff_s(attempt: int, base_s: float, cap_s: float, rng: _Uniform = random) -> float:
    """backoff_ms in seconds, for waits measured in seconds (a worker's reconnects)."""
    return backoff_ms(attempt, round(base_s * 1000), round(cap_s * 1000), rng) / 1000

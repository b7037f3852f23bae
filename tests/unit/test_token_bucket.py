"""The rate limiter's token bucket and a limited queue's grant (broker.queue.restricted): pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from broker.queue.restricted import Grant, bucket, grant

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("rate", "tokens", "elapsed", "expected"),
    [
        (2.0, 0.0, 0.5, 1.0),
        (2.0, 0.0, 10.0, 2.0),  # capacity max(1, rate)
        (0.1, 0.0, 5.0, 0.5),
        (0.1, 0.5, 100.0, 1.0),  # capacity 1 below one a second
        (100.0, 3.0, 0.01, 4.0),
        (5.0, 1.0, -1.0, 1.0),  # a clock that steps back refills nothing
    ],
)
def test_bucket__refills_at_rate_up_to_capacity(
    rate: float, tokens: float, elapsed: float, expected: float
) -> None:
    assert bucket(rate, tokens, at(0), at(elapsed)) == pytest.approx(expected)


def test_bucket__never_refilled__full() -> None:
    assert bucket(7.5, 0.0, None, at(0)) == 7.5
    assert bucket(0.2, 0.0, None, at(0)) == 1.0


def test_bucket__over_any_window__at_most_rate_t_plus_capacity() -> None:
    # Spend every whole token as soon as it comes, for 10 s in 1 ms steps: API.md's bound holds
    # for every window.
    rate, tokens, refilled, spent = 3.0, 3.0, at(0), []
    for ms in range(10_000):
        now = at(ms / 1000)
        tokens, refilled = bucket(rate, tokens, refilled, now), now
        while tokens >= 1:
            tokens -= 1
            spent.append(ms / 1000)
    for i, start in enumerate(spent):
        for span in (0.001, 0.5, 1.0, 3.3, 10.0):
            inside = sum(1 for t in spent[i:] if t - start <= span)
            assert inside <= rate * span + max(1.0, rate) + 1e-9
    assert len(spent) == pytest.approx(3 + 3 * 10, abs=1)


def test_grant__cap_rate_and_limit__the_least_of_them() -> None:
    row = ("q", 5, 10.0, 2.5, at(0))
    assert grant(row, in_flight=0, at=at(0), limit=100) == Grant("q", 2, 10.0, 2.5, False)
    assert grant(row, in_flight=4, at=at(0), limit=100).most == 1
    full = grant(row, in_flight=5, at=at(0), limit=100)
    assert (full.most, full.full) == (0, True)
    assert grant(("q", None, None, 0.0, None), in_flight=9, at=at(0), limit=7).most == 7


def test_grant__retry_in__until_a_whole_token__none_when_full_or_no_rate() -> None:
    assert grant(("q", None, 4.0, 0.5, at(0)), 0, at(0), 10).retry_in() == pytest.approx(0.125)
    assert grant(("q", None, 4.0, 1.0, at(0)), 0, at(0), 10).retry_in() is None
    assert grant(("q", 1, 4.0, 0.5, at(0)), 1, at(0), 10).retry_in() is None  # full: a settle
    assert grant(("q", 3, None, 0.0, None), 0, at(0), 10).retry_in() is None

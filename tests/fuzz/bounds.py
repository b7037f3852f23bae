"""Bounded work for any input (API.md, Errors): a parse's CPU time, measured and held to a bound
proportional to its input's size, and the adversarial shapes that find superlinear parsers.

Time is this thread's CPU time, not the wall clock: other processes on a busy host do not move
it. A parse past ABORT_S of CPU is interrupted (SIGVTALRM: the regular-expression engine checks
for signals as it backtracks), so a quadratic parser fails its test in seconds, not hours.
"""

from __future__ import annotations

import gc
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import strategies as st

# The contract's "a few milliseconds per 100 KB", with room for a slow CI host; a quadratic
# parser takes seconds at 100 KB, a linear one well under a millisecond or two.
PER_100_KB_S = 0.02
FLOOR_S = 0.02  # what any call costs whatever its size (a request through Django: more)
ABORT_S = 3.0

# Characters that regular expressions over request data repeat: whitespace (U+00A0 included:
# `\s` matches it), digits and signs, word characters, separators, brackets.
RUN_CHARS = (
    " ", "\t", "\xa0", "\u2003", "0", "9", "1", ".", "e", "E", "+", "-", "a", "Z", "_", ",",
    "=", ";", ":", "/", "[", "]", "{", "}", '"', "\\", "%", "&", "\x00", "é",
)  # fmt: skip


class TooSlow(Exception):
    """A parse ran past ABORT_S of CPU time."""


def _abort(signum: int, frame: Any) -> None:
    raise TooSlow(f"interrupted after {ABORT_S} s of CPU")


@contextmanager
def cpu_clock() -> Iterator[Callable[[], float]]:
    """Measures this thread's CPU time (GC off) and interrupts it past ABORT_S; yields a
    function reading the seconds spent so far."""
    previous = signal.signal(signal.SIGVTALRM, _abort)
    collecting = gc.isenabled()
    gc.disable()
    started = time.thread_time()
    signal.setitimer(signal.ITIMER_VIRTUAL, ABORT_S)
    try:
        yield lambda: time.thread_time() - started
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)
        if collecting:
            gc.enable()


def budget_s(size: int, floor_s: float = FLOOR_S) -> float:
    """The CPU time a parse of `size` bytes (or characters) may take."""
    return floor_s + PER_100_KB_S * size / 100_000


def assert_bounded(parse: Callable[[], Any], size: int, what: str, floor_s: float = FLOOR_S) -> Any:
    """Run `parse` (its exceptions are its answer, returned); fail when it took more CPU than
    budget_s(size), or ran past ABORT_S."""
    outcome: Any = None
    with cpu_clock() as spent:
        try:
            outcome = parse()
        except TooSlow:
            raise AssertionError(f"{what}: over {ABORT_S} s of CPU for {size} bytes") from None
        except Exception as exc:  # a refusal is an answer like any other
            outcome = exc
        took = spent()
    limit = budget_s(size, floor_s)
    assert took <= limit, f"{what}: {took * 1000:.1f} ms of CPU for {size} bytes (> {limit:.3f} s)"
    return outcome


def runs(most: int = 200_000) -> st.SearchStrategy[str]:
    """Adversarial text: a few long runs of one character each ("   ...x", "000...0.", "[[[...")
    with short pieces between them, up to `most` characters."""
    run = st.tuples(st.sampled_from(RUN_CHARS), st.integers(1, most // 4)).map(
        lambda p: p[0] * p[1]
    )
    piece = st.text(alphabet=st.sampled_from(RUN_CHARS), max_size=8)
    return st.lists(st.one_of(run, piece), min_size=1, max_size=6).map("".join)


def nested(most: int = 100_000) -> st.SearchStrategy[str]:
    """Brackets nested deep: `[[[[...]]]]`, `{"a":{"a":...`, or left open."""
    depth = st.integers(1, most)
    closed = depth.map(lambda n: "[" * n + "]" * n)
    objects = depth.map(lambda n: '{"a":' * n + "1" + "}" * n)
    open_ = depth.map(lambda n: "[" * n)
    return st.one_of(closed, objects, open_)

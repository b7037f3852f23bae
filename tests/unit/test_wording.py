"""contract.wording: the one place a sentence says a count."""

from __future__ import annotations

import pytest

from contract.wording import counted, nouned


@pytest.mark.parametrize(
    ("n", "said"),
    [(0, "0 tasks"), (1, "1 task"), (2, "2 tasks"), (1.0, "1 task"), (0.5, "0.5 tasks")],
)
def test_counted__singular_for_exactly_one(n: float, said: str) -> None:
    assert counted(n, "task") == said


def test_counted__irregular_plural__as_given() -> None:
    assert counted(3, "entry", "entries") == "3 entries"
    assert counted(1, "entry", "entries") == "1 entry"


def test_nouned__the_word_alone() -> None:
    assert [nouned(n, "was", "were") for n in (0, 1, 2)] == ["were", "was", "were"]

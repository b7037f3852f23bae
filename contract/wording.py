"""How a sentence says a count ("1 task", "2 tasks"): written once, for the broker and workers."""

from __future__ import annotations


def counted(n: float, noun: str, plural: str = "") -> str:
    """`n` and its noun, singular for exactly 1: counted(1, "task") → "1 task", counted(0, "task")
    → "0 tasks", counted(2, "key", "keys") → "2 keys". `plural` when adding "s" is wrong."""
    shown = f"{n:g}" if isinstance(n, float) else str(n)
    return f"{shown} {noun if n == 1 else plural or noun + 's'}"


def nouned(n: int, noun: str, plural: str = "") -> str:
    """The noun alone, as a count of `n` wants it: nouned(1, "task") → "task"."""
    return noun if n == 1 else plural or noun + "s"

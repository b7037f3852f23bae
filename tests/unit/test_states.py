"""The transition table: every move names known states and counters, and keeps the invariant."""

from __future__ import annotations

import pytest

from broker.states import (
    COUNTERS,
    FINISHED_STATES,
    GAUGE_STATES,
    PRIORITY_BY_NAME,
    PRIORITY_NAMES,
    TRANSITIONS,
    Priority,
    State,
)
from tests.conftest import COUNTER_NAMES


def test_states__exactly_the_seven_of_the_contract() -> None:
    assert set(State.values) == {
        "blocked", "ready", "handed_out", "delayed", "dead", "done", "cancelled",
    }  # fmt: skip
    assert set(GAUGE_STATES) | set(FINISHED_STATES) == set(State)
    assert not set(GAUGE_STATES) & set(FINISHED_STATES)


def test_counters__exactly_the_totals_of_the_contract() -> None:
    assert tuple(COUNTERS) == COUNTER_NAMES


@pytest.mark.parametrize("event", list(TRANSITIONS))
def test_transition__names_known_states_and_counters(event: str) -> None:
    sources, target, counters = TRANSITIONS[event]
    assert sources <= set(State)
    assert target in set(State)
    assert set(counters) <= set(COUNTERS)


@pytest.mark.parametrize("event", list(TRANSITIONS))
def test_transition__keeps_nacked_plus_reclaimed_equal_retried_plus_buried(event: str) -> None:
    counters = TRANSITIONS[event][2]
    left = sum(c in ("nacked", "reclaimed") for c in counters)
    right = sum(c in ("retried", "buried") for c in counters)
    assert left == right


@pytest.mark.parametrize(
    ("event", "sources", "target"),
    [
        ("claim", {"ready"}, "handed_out"),
        ("ack", {"handed_out"}, "done"),
        ("nack_retry", {"handed_out"}, "delayed"),
        ("nack_bury", {"handed_out"}, "dead"),
        ("reclaim_retry", {"handed_out"}, "delayed"),
        ("reclaim_bury", {"handed_out"}, "dead"),
        ("promote", {"delayed"}, "ready"),
        ("requeue", {"dead"}, "ready"),
        ("cancel", {"ready", "delayed", "handed_out", "blocked"}, "cancelled"),
        ("enqueue_blocked", set(), "blocked"),
        ("unblock", {"blocked"}, "ready"),
        ("unblock_delayed", {"blocked"}, "delayed"),
        ("debounce", {"ready", "delayed"}, "delayed"),
        ("debounce_ready", {"ready", "delayed"}, "ready"),
    ],
)
def test_transition__matches_the_contract_diagram(
    event: str, sources: set[str], target: str
) -> None:
    assert TRANSITIONS[event][:2] == (sources, target)


def test_priority__high_claims_before_normal_before_low() -> None:
    assert Priority.HIGH < Priority.NORMAL < Priority.LOW
    assert PRIORITY_BY_NAME == {"high": 0, "normal": 1, "low": 2}
    assert {v: k for k, v in PRIORITY_BY_NAME.items()} == PRIORITY_NAMES

"""Fair and key-capped claims as n single claims in a row, on either database (API.md "Keys" and
the claim section): a full key's tasks never hold back other keys' tasks, a claim of several is
that many single claims, and a claim over several queues keeps priority then age across them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from broker import queue, queues, waiting
from broker.queue import NewTask
from broker.states import Priority

pytestmark = pytest.mark.django_db

HIGH, NORMAL, LOW = Priority.HIGH, Priority.NORMAL, Priority.LOW


def put(name: str, key: str | None, n: int = 1, **fields: Any) -> list[int]:
    specs = [NewTask(payload=json.dumps(i), queue=name, key=key, **fields) for i in range(n)]
    return queue.enqueue_many(specs)


def claimed(scope: list[str] | None, n: int = 1) -> list[int]:
    return [d.task.pk for d in queue.claim(scope, 60_000, limit=n)]


# -- a full key at the top priority ---------------------------------------------------------


@pytest.mark.parametrize("fair", [True, False])
def test_key_max__a_full_keys_higher_priority__other_keys_still_handed_out(
    fair: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(waiting, "workers_seen", lambda name, every=True: True)
    queues.update("f", {"fair": fair, "key_max_in_flight": 1})
    a1, a2 = put("f", "A", 2, priority=HIGH)
    (b1,) = put("f", "B", priority=NORMAL)
    assert claimed(["f"]) == [a1]
    w = waiting.explain(b1)
    assert w is not None and (w["reason"], w["ahead"]) == ("queued", 0)
    w = waiting.explain(a2)
    assert w is not None and w["reason"] == "key_full"
    assert claimed(["f"]) == [b1]
    assert claimed(["f"]) == []


def test_key_max__a_key_filled_within_a_claim__the_rest_of_the_claim_goes_on() -> None:
    queues.update("f", {"fair": True, "key_max_in_flight": 1})
    a1, _ = put("f", "A", 2, priority=HIGH)
    (b1,) = put("f", "B", priority=NORMAL)
    (c1,) = put("f", "C", priority=LOW)
    assert claimed(["f"], 5) == [a1, b1, c1]


# -- a claim of several is that many single claims ------------------------------------------


def _mixed(name: str) -> tuple[int, int, int, int]:
    """A1 high, A2 B1 C1 normal: keys never served, A's oldest first."""
    (a1,) = put(name, "A", priority=HIGH)
    (a2,) = put(name, "A", priority=NORMAL)
    (b1,) = put(name, "B", priority=NORMAL)
    (c1,) = put(name, "C", priority=NORMAL)
    return a1, a2, b1, c1


def test_fair__a_claim_of_mixed_priorities__as_single_claims_in_a_row() -> None:
    queues.update("one", {"fair": True})
    queues.update("many", {"fair": True})
    a1, _, b1, c1 = _mixed("one")
    singles = claimed(["one"]) + claimed(["one"]) + claimed(["one"])
    assert singles == [a1, b1, c1]
    m_a1, _, m_b1, m_c1 = _mixed("many")
    assert claimed(["many"], 3) == [m_a1, m_b1, m_c1]


def test_fair__priority_back_up_within_a_claim__keys_served_in_it_go_last() -> None:
    queues.update("f", {"fair": True})
    (a1,) = put("f", "A", priority=NORMAL)
    (b1,) = put("f", "B", priority=NORMAL)
    (a2,) = put("f", "A", priority=NORMAL)
    (c1,) = put("f", "C", priority=LOW)
    (b2,) = put("f", "B", priority=LOW)
    # Rounds: A B (normal), A (normal, alone), then low: C never served in this claim, then B.
    assert claimed(["f"], 5) == [a1, b1, a2, c1, b2]


# -- a claim over several queues ------------------------------------------------------------


@pytest.mark.parametrize("setting", [{"fair": True}, {"key_max_in_flight": 5}])
def test_claim_over_queues__priority_then_age_across_a_keyed_queue(setting: dict) -> None:
    queues.update("keyed", setting)
    (urgent,) = put("plain", None, priority=HIGH)
    low = put("keyed", "k", 3, priority=LOW)
    assert claimed(["plain", "keyed"]) == [urgent]
    assert claimed(["plain", "keyed"]) == [low[0]]


def test_claim_over_queues__a_claim_of_several_merges_them_in_claim_order() -> None:
    queues.update("fair", {"fair": True})
    queues.update("capped", {"max_in_flight": 10})
    (f_low,) = put("fair", "a", priority=LOW)
    (p_high,) = put("plain", None, priority=HIGH)
    (f_normal,) = put("fair", "b", priority=NORMAL)
    (c_normal,) = put("capped", None, priority=NORMAL)
    (p_low,) = put("plain", None, priority=LOW)
    got = claimed(["plain", "fair", "capped"], 5)
    assert got == [p_high, f_normal, c_normal, f_low, p_low]


def test_claim_over_queues__two_fair_queues__each_fair_within_age_across() -> None:
    queues.update("f1", {"fair": True})
    queues.update("f2", {"fair": True})
    (x1,) = put("f1", "x")
    (y1,) = put("f2", "y")
    (x2,) = put("f1", "x")
    (z1,) = put("f1", "z")
    # f1's fair order: x1, z1 (z never served before x's second), x2; merged with f2 by age.
    assert claimed(["f1", "f2"], 4) == [x1, y1, z1, x2]


def test_claim_of_every_queue__a_plain_urgent_task_before_a_fair_backlog() -> None:
    queues.update("fair", {"fair": True})
    backlog = put("fair", None, 3, priority=LOW)
    (urgent,) = put("plain", None, priority=HIGH)
    assert claimed(None, 2) == [urgent, backlog[0]]

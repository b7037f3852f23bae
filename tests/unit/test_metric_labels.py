"""bounded_by_queue: per-queue gauges with a bounded set of queue labels; pure, no database."""

from __future__ import annotations

from broker.metrics import OTHER_QUEUES, bounded_by_queue


def _gauges(**ready: int) -> dict[str, dict[str, int]]:
    return {q: {"ready": n, "handed_out": 0, "delayed": 0, "dead": 0} for q, n in ready.items()}


def _totals(per_queue: dict[str, dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for states in per_queue.values():
        for state, n in states.items():
            out[state] = out.get(state, 0) + n
    return out


def _bounded(gauges: dict[str, dict[str, int]], keep: int) -> dict[str, dict[str, int]]:
    holding = sum(1 for states in gauges.values() if any(states.values()))
    return bounded_by_queue(gauges, _totals(gauges), holding, keep=keep)


def test_bounded__few_queues__unchanged_and_no_other() -> None:
    gauges = _gauges(default=1, mail=3)
    assert _bounded(gauges, keep=2) == gauges


def test_bounded__many_queues__busiest_kept_rest_summed_as_other() -> None:
    gauges = _gauges(a=5, b=1, c=9, d=0, e=2)
    gauges["b"]["dead"] = 4  # live tasks in any state count: b has 5

    bounded = _bounded(gauges, keep=2)

    assert list(bounded) == ["c", "a", OTHER_QUEUES]  # a and b tie at 5: by name
    assert bounded[OTHER_QUEUES] == {"ready": 3, "handed_out": 0, "delayed": 0, "dead": 4}
    assert _totals(bounded) == _totals(gauges)


def test_bounded__a_queue_named_other__never_two_labels_of_that_name() -> None:
    gauges = _gauges(other=7, a=1, b=2)

    assert _bounded(gauges, keep=5) == _gauges(b=2, a=1, other=7)
    bounded = _bounded(gauges, keep=1)
    assert list(bounded) == ["b", OTHER_QUEUES]
    assert bounded[OTHER_QUEUES]["ready"] == 8


def test_bounded__ten_thousand_queues__keep_plus_one_labels() -> None:
    gauges = _gauges(**{f"q{i:05}": i % 7 for i in range(10_000)})
    bounded = _bounded(gauges, keep=50)
    assert len(bounded) == 51
    assert _totals(bounded) == _totals(gauges)


def test_bounded__only_the_busiest_given__the_rest_from_the_totals() -> None:
    gauges = _gauges(a=5, b=1, c=9, d=3)
    busiest = {q: gauges[q] for q in ("c", "a")}
    bounded = bounded_by_queue(busiest, _totals(gauges), holding=4, keep=2)
    assert bounded == {**busiest, OTHER_QUEUES: _gauges(x=4)["x"]}
    assert bounded_by_queue(busiest, _totals(busiest), holding=2, keep=2) == busiest

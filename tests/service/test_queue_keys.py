"""Keys through broker.queue and broker.queues: ordered lines, fair rotation, per-key caps, the
`waiting` they explain, on either database (API.md "Keys")."""

from __future__ import annotations

import importlib
import json
from datetime import timedelta
from typing import Any
from unittest.mock import ANY

import pytest
from django.utils import timezone

from broker import queue, queues, waiting
from broker.models import KeyState, Task
from broker.queue import NewTask
from broker.states import State
from tests.conftest import Clock, assert_invariant

pytestmark = pytest.mark.django_db


def put(name: str, key: str | None, n: int = 1, **fields: Any) -> list[int]:
    specs = [NewTask(payload=json.dumps(i), queue=name, key=key, **fields) for i in range(n)]
    return queue.enqueue_many(specs)


def one(name: str, key: str | None, **fields: Any) -> int:
    pk, _ = queue.enqueue(NewTask(payload="1", queue=name, key=key, **fields))
    return pk


def claimed(name: str, n: int = 1) -> list[tuple[int, str | None]]:
    return [(d.task.pk, d.task.key) for d in queue.claim([name], 60_000, limit=n)]


def take(name: str, n: int = 1) -> dict[int, str]:
    """Claim up to n: {task id: lease}."""
    return {d.task.pk: d.lease_id for d in queue.claim([name], 60_000, limit=n)}


# -- ordered ----------------------------------------------------------------------------------


def test_ordered__one_task_of_a_key_at_a_time_in_enqueue_order() -> None:
    queues.update("o", {"ordered": True})
    a = put("o", "acct-a", 3)
    b = put("o", "acct-b", 2)
    free = put("o", None, 2)  # keyless tasks are not ordered
    first = take("o", 10)
    assert sorted(first) == sorted([a[0], b[0], *free])
    assert [Task.objects.get(pk=pk).key_wait for pk in a] == [False, True, True]
    assert take("o", 10) == {}
    queue.ack(a[0], lease_id=first[a[0]])
    assert list(take("o", 10)) == [a[1]]


def test_ordered__priority_does_not_reorder_a_key() -> None:
    queues.update("o", {"ordered": True})
    low = one("o", "k", priority=2)
    high = one("o", "k", priority=0)
    assert list(take("o", 5)) == [low]
    queue.ack(low, lease_id=Task.objects.get(pk=low).lease_id or "")
    assert list(take("o", 5)) == [high]


@pytest.mark.parametrize("how", ["retry", "delay", "blocked"])
def test_ordered__a_retrying_delayed_or_blocked_task_holds_its_key(how: str, clock: Clock) -> None:
    queues.update("o", {"ordered": True})
    if how == "delay":
        held = one("o", "k", delay_ms=60_000)
    elif how == "blocked":
        parent = one("elsewhere", None)
        held = one("o", "k", after=(parent,))
    else:
        held = one("o", "k", max_attempts=3)
    after = one("o", "k")
    if how == "retry":
        lease = take("o")[held]
        assert queue.nack(held, lease_id=lease, error="x") == State.DELAYED
    assert take("o", 5) == {}
    w = waiting.explain(after)
    assert w is not None and (w["reason"], w["behind"]) == ("key_busy", str(held))
    assert f"Task {held} of its key 'k' is not finished" in w["detail"]
    if how == "blocked":
        queue.cancel(held)
    else:
        clock.advance(120_000)
        queue.promote_delayed()
        queue.ack(held, lease_id=take("o")[held])
    assert list(take("o", 5)) == [after]


@pytest.mark.parametrize("end", ["ack", "dead", "cancel", "reclaim_dead"])
def test_ordered__any_end_of_the_head_gives_the_next_its_turn(end: str, clock: Clock) -> None:
    queues.update("o", {"ordered": True})
    head, nxt = put("o", "k", 2, max_attempts=1)
    lease = take("o")[head]
    if end == "ack":
        queue.ack(head, lease_id=lease)
    elif end == "dead":
        queue.nack(head, lease_id=lease, error="x")
    elif end == "cancel":
        queue.cancel(head)
    else:
        clock.advance(61_000)
        assert queue.reclaim_expired() == 1
    assert Task.objects.get(pk=nxt).key_wait is False
    assert list(take("o")) == [nxt]


@pytest.mark.parametrize("cancelled", ["middle", "last"])
def test_ordered__a_waiting_task_cancelled__leaves_its_place_not_its_turn(cancelled: str) -> None:
    queues.update("o", {"ordered": True})
    head, middle, last = put("o", "k", 3)
    lease = take("o")[head]
    queue.cancel(middle if cancelled == "middle" else last)
    later = one("o", "k")  # joins behind the live end of the line
    assert take("o", 5) == {}  # the head still runs: nobody else of the key
    queue.ack(head, lease_id=lease)
    order = [last, later] if cancelled == "middle" else [middle, later]
    for pk in order:
        got = take("o", 5)
        assert list(got) == [pk]
        queue.ack(pk, lease_id=got[pk])


def test_ordered__requeued_from_the_dlq__joins_the_end_of_its_key_line() -> None:
    queues.update("o", {"ordered": True})
    first, second, third = put("o", "k", 3, max_attempts=1)
    queue.nack(first, lease_id=take("o")[first], error="x")  # dead: the line moves on
    lease = take("o")[second]
    queue.requeue(first)
    assert Task.objects.get(pk=first).key_wait is True  # behind third, which is still waiting
    queue.ack(second, lease_id=lease)
    queue.ack(third, lease_id=take("o")[third])
    assert list(take("o")) == [first]


def test_ordered__turned_off__every_waiting_task_claimable() -> None:
    queues.update("o", {"ordered": True})
    ids = put("o", "k", 3)
    assert queues.update("o", {"ordered": False})["ordered"] is False
    assert sorted(take("o", 5)) == ids


def test_ordered__turned_on__the_tasks_already_there_line_up_per_key() -> None:
    ks = put("o", "k", 3)
    js = put("o", "j", 2)
    (out,) = take("o")  # the oldest: k's first, handed out before the queue is ordered
    assert out == ks[0]
    assert queues.update("o", {"ordered": True})["ordered"] is True
    assert waiting.explain(ks[1]) == {
        "reason": "key_busy", "behind": str(ks[0]), "detail": ANY
    }  # fmt: skip
    first = take("o", 5)
    assert list(first) == [js[0]]  # each key's next waits for the one before it
    (later,) = put("o", "k")  # enqueued after the switch: at the end of k's line
    queue.ack(js[0], lease_id=first[js[0]])
    queue.ack(out, lease_id=Task.objects.get(pk=out).lease_id)
    seen = []
    while got := take("o", 5):
        for pk, lease in got.items():
            seen.append(pk)
            queue.ack(pk, lease_id=lease)
    assert seen == [ks[1], js[1], ks[2], later]


def _end(pk: int, lease: str, how: str, clock: Clock) -> None:
    """End a handed-out task (max_attempts 1) one way or another."""
    if how == "ack":
        queue.ack(pk, lease_id=lease)
    elif how == "dead":
        assert queue.nack(pk, lease_id=lease, error="x") == State.DEAD
    elif how == "cancel":
        queue.cancel(pk)
    else:  # its lease lapses: reclaimed to dead
        Task.objects.filter(pk=pk).update(lease_deadline=timezone.now() - timedelta(days=1))
        assert queue.reclaim_expired() == 1


@pytest.mark.parametrize("how", ["ack", "dead", "cancel", "reclaim_dead"])
@pytest.mark.parametrize("ends", [(2, 1, 0), (0, 2, 1), (1, 0, 2)])
def test_ordered__turned_on_with_several_of_a_key_out__the_next_waits_for_every_one(
    ends: tuple[int, int, int], how: str, clock: Clock
) -> None:
    ks = put("o", "k", 5, max_attempts=1)
    out = take("o", 3)  # three of k at once: the queue is not ordered yet
    assert sorted(out) == ks[:3]
    queues.update("o", {"ordered": True})
    (later,) = put("o", "k", max_attempts=1)
    for n, i in enumerate(ends):
        assert take("o", 5) == {}, f"handed out with {3 - n} of its key still out"
        w = waiting.explain(ks[3])
        assert w is not None and w["reason"] == "key_busy", w
        _end(ks[i], out[ks[i]], how, clock)
    seen = []
    while got := take("o", 5):
        ((pk, lease),) = got.items()  # one at a time, in enqueue order
        seen.append(pk)
        queue.ack(pk, lease_id=lease)
    assert seen == [ks[3], ks[4], later]
    assert_invariant()


@pytest.mark.parametrize("ends", [(1, 0), (0, 1)])
def test_ordered__turned_on_with_only_the_keys_tasks_out__a_later_one_waits_for_each(
    ends: tuple[int, int],
) -> None:
    """No task of the key is left to line up: the key's line ends with those out (its tail)."""
    ks = put("o", "k", 2)
    out = take("o", 2)
    queues.update("o", {"ordered": True})
    (later,) = put("o", "k")
    queue.ack(ks[ends[0]], lease_id=out[ks[ends[0]]])
    assert take("o", 5) == {}
    queue.ack(ks[ends[1]], lease_id=out[ks[ends[1]]])
    assert list(take("o", 5)) == [later]


def test_ordered__turned_on_with_several_out__a_retry_waits_for_the_earlier_ones(
    clock: Clock,
) -> None:
    ks = put("o", "k", 3, max_attempts=3)
    out = take("o", 2)
    queues.update("o", {"ordered": True})
    assert queue.nack(ks[1], lease_id=out[ks[1]], error="x") == State.DELAYED
    clock.advance(3_600_000)
    queue.promote_delayed()
    assert take("o", 5) == {}  # the retry of the second waits for the first, still out
    queue.ack(ks[0], lease_id=out[ks[0]])
    got = take("o", 5)
    assert list(got) == [ks[1]]
    queue.ack(ks[1], lease_id=got[ks[1]])
    assert list(take("o", 5)) == [ks[2]]


def test_ordered__a_batch_of_one_key__chained_in_its_order() -> None:
    queues.update("o", {"ordered": True})
    ids = put("o", "k", 4)
    seen = []
    while got := take("o", 4):
        ((pk, lease),) = got.items()
        seen.append(pk)
        queue.ack(pk, lease_id=lease)
    assert seen == ids


# -- fair -------------------------------------------------------------------------------------


def test_fair__a_backlog_does_not_hold_back_another_keys_first_task() -> None:
    queues.update("f", {"fair": True})
    put("f", "big", 500)
    (small,) = put("f", "small")
    got = [pk for pk, _ in claimed("f")] + [pk for pk, _ in claimed("f")]
    assert small in got  # within two claims, whatever the backlog


def test_fair__a_claim_of_several__round_robin_by_last_hand_out() -> None:
    queues.update("f", {"fair": True})
    put("f", "a", 5)
    put("f", "b", 2)
    put("f", "c", 1)
    put("f", None, 1)
    first = claimed("f", 6)
    # Never served, oldest first (the keyless tasks count as one key): one of each, then again.
    assert [key for _, key in first] == ["a", "b", "c", None, "a", "b"]
    second = claimed("f", 3)
    assert [key for _, key in second] == ["a", "a", "a"]
    served = dict(KeyState.objects.filter(queue="f").values_list("key", "served_at"))
    assert served["c"] < served[""] < served["b"] < served["a"]


@pytest.mark.parametrize("keys", [["b", "a", None], [None, "b", "a"], ["z", None, "y"]])
def test_fair__keys_never_served__their_oldest_task_first(keys: list[str | None]) -> None:
    queues.update("f", {"fair": True})
    for key in keys:
        put("f", key)
    assert [key for _, key in claimed("f", 3)] == keys
    for key in keys:
        put("f", key)
    assert [key for _, key in (claimed("f") + claimed("f") + claimed("f"))] == keys


def test_fair__a_key_served_last_waits_for_the_others() -> None:
    queues.update("f", {"fair": True})
    put("f", "a", 3)
    assert [key for _, key in claimed("f")] == ["a"]
    put("f", "b", 1)
    assert [key for _, key in claimed("f", 2)] == ["b", "a"]


def test_fair__priorities_still_hold_across_keys() -> None:
    queues.update("f", {"fair": True})
    put("f", "a", 2)
    (urgent,) = put("f", "b", priority=0)
    assert claimed("f")[0][0] == urgent


def test_fair__one_key_alone_at_the_top__its_tasks_then_a_round_below() -> None:
    queues.update("f", {"fair": True})
    top = put("f", None, 3, priority=0)
    put("f", "b", 2)
    (low_a,) = put("f", "a")
    got = claimed("f", 6)
    # The keyless tasks alone are urgent: all three, as three claims in a row would take them;
    # then a round of the next priority, oldest key first ("b" before "a": never served).
    assert got[:3] == [(pk, None) for pk in top]
    assert [key for _, key in got[3:]] == ["b", "a", "b"]
    assert got[4][0] == low_a


def test_fair__one_key_alone__a_claim_of_several_stops_at_its_limit() -> None:
    queues.update("f", {"fair": True, "key_max_in_flight": 2})
    busy = put("f", "busy", 5)
    assert [pk for pk, _ in claimed("f", 5)] == busy[:2]


# -- key_max_in_flight ------------------------------------------------------------------------


@pytest.mark.parametrize("fair", [False, True])
def test_key_max__a_full_key_waits_others_go_keyless_unlimited(fair: bool) -> None:
    queues.update("m", {"key_max_in_flight": 2, "fair": fair})
    busy = put("m", "busy", 5)
    other = put("m", "other", 1)
    free = put("m", None, 3)
    got = take("m", 20)
    assert sorted(got) == sorted([*busy[:2], *other, *free])
    w = waiting.explain(busy[2])
    assert w is not None and w["reason"] == "key_full"
    assert (
        w["detail"] == "Its key 'busy' has 2 tasks handed out, the queue's key_max_in_flight is 2."
    )
    queue.ack(busy[0], lease_id=got[busy[0]])
    assert list(take("m", 20)) == [busy[2]]


def test_key_max__raised__more_go() -> None:
    queues.update("m", {"key_max_in_flight": 1})
    ids = put("m", "k", 3)
    assert len(take("m", 5)) == 1
    queues.update("m", {"key_max_in_flight": None})
    assert sorted(take("m", 5)) == ids[1:]


def test_fair__a_key_idle_for_a_moment__keeps_its_place_behind_a_backlog() -> None:
    queues.update("f", {"fair": True})
    put("f", "b", 2)
    put("f", "a")
    first = claimed("f", 2)
    assert [key for _, key in first] == ["b", "a"]
    (a0,) = [pk for pk, key in first if key == "a"]
    queue.ack(a0, lease_id=Task.objects.get(pk=a0).lease_id)
    queue.keys.prune()  # "a" has no live task now: its row stays, its last hand-out with it
    put("f", "a")
    assert [key for _, key in claimed("f")] == ["b"]  # served before "a": its turn
    ((a1, _),) = claimed("f")
    queue.ack(a1, lease_id=Task.objects.get(pk=a1).lease_id)
    KeyState.objects.filter(key="a").update(served_at=timezone.now() - queue.keys.SERVED_KEEP)
    assert queue.keys.prune() == 1  # idle, and served longer ago than a row is kept


@pytest.mark.parametrize("fair_from_the_start", [True, False])
def test_fair__a_task_requeued_after_its_keys_row_was_pruned__handed_out(
    fair_from_the_start: bool,
) -> None:
    if fair_from_the_start:
        queues.update("f", {"fair": True})
    (pk,) = put("f", "k", max_attempts=1)
    queue.nack(pk, lease_id=take("f")[pk], error="boom")
    assert Task.objects.get(pk=pk).state == State.DEAD
    KeyState.objects.filter(key="k").update(served_at=timezone.now() - queue.keys.SERVED_KEEP)
    assert queue.keys.prune() == 1  # only a dead task left: not live
    queues.update("f", {"fair": True})
    queue.requeue(pk)
    assert [got for got, _ in claimed("f")] == [pk]


def test_migration_0020__keys_of_unfinished_tasks_without_a_row__restored_as_never_served() -> None:
    from django.apps import apps

    restore = importlib.import_module("broker.migrations.0020_keystate_of_requeued_tasks").restore
    put("f", "k")  # its row lost, as a requeue after a prune left it
    put("f", "kept")
    (done,) = put("f", "gone")
    queue.ack(done, lease_id=take("f", 3)[done])
    KeyState.objects.filter(key__in=["k", "gone"]).delete()
    restore(apps, None)
    rows = dict(KeyState.objects.filter(queue="f").values_list("key", "served_at"))
    assert set(rows) == {"k", "kept"}
    assert rows["k"] < timezone.now() - timedelta(days=365)


# -- keys themselves --------------------------------------------------------------------------


def test_key_state__pruned_once_a_key_has_no_live_task() -> None:
    (pk,) = put("p", "gone")
    put("p", "stays")
    assert set(KeyState.objects.values_list("key", flat=True)) >= {"gone", "stays"}
    queue.ack(pk, lease_id=take("p", 1).get(pk) or take("p", 1)[pk])
    assert queue.keys.prune() == 1
    assert "gone" not in set(KeyState.objects.values_list("key", flat=True))


def test_key_state__prune_walks_every_key__not_only_the_longest_unserved() -> None:
    for key in ("a", "b", "c", "d"):  # never served: all four sort first by served_at
        put("p", key)
    (idle,) = put("p", "idle")
    queue.ack(idle, lease_id=take("p", 5)[idle])
    # Served last, but longer ago than an idle key's row is kept.
    served = timezone.now() - queue.keys.SERVED_KEEP - timedelta(seconds=1)
    KeyState.objects.filter(key="idle").update(served_at=served)
    KeyState.objects.exclude(key="idle").update(served_at=served - timedelta(seconds=1))
    assert "idle" in set(KeyState.objects.values_list("key", flat=True))
    found = sum(queue.keys.prune(limit=2) for _ in range(3))
    assert found == 1
    assert "idle" not in set(KeyState.objects.values_list("key", flat=True))

"""A wake-up that the woken claim cannot use (its client left, its claim failed) goes on to the
next parked claimer of the queue: on PostgreSQL each NOTIFY is heard once, so none may be lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from broker import longpoll, queue
from broker.longpoll import claim_wait

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

QUEUE = "handoff"


# Claims each named thread has finished: a parked claim has finished two (one before parking,
# one after) before it waits for its wake-up.
_looked: dict[str, int] = {}


@pytest.fixture(autouse=True)
def _gone_checked_only_on_wake(monkeypatch: pytest.MonkeyPatch) -> None:
    # A parked claim looks at its socket every GONE_CHECK_S; a hang-up just before the wake-up
    # is noticed only once the wake has arrived. Make that the case every time, not by luck.
    monkeypatch.setattr(longpoll, "GONE_CHECK_S", 30.0)
    real_claim = queue.claim

    def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            return real_claim(*args, **kwargs)
        finally:
            name = threading.current_thread().name
            _looked[name] = _looked.get(name, 0) + 1

    monkeypatch.setattr(queue, "claim", counted)
    _looked.clear()


def _park(name: str, wait_ms: int, gone: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}

    def run() -> None:
        try:
            out["got"] = claim_wait([QUEUE], lease_ms=30_000, wait_ms=wait_ms, gone=gone)
        except Exception as exc:
            out["raised"] = exc
        finally:
            out["at"] = time.monotonic()
            connection.close()

    out["thread"] = threading.Thread(target=run, name=name)
    out["thread"].start()
    _wait_parked(name)
    return out


def _wait_parked(name: str) -> None:
    end = time.monotonic() + 10
    while _looked.get(name, 0) < 2:
        assert time.monotonic() < end, f"{name} did not park"
        time.sleep(0.01)
    time.sleep(0.02)  # from its second look to waiting on its event: no database work


def _enqueue_and_time(enqueue_task: Callable[..., int]) -> tuple[int, float]:
    start = time.monotonic()
    return enqueue_task(payload="for the claimer still there", queue=QUEUE), start


def test_wake__first_parked_claimer_hung_up__next_one_gets_the_task_at_once(
    enqueue_task: Callable[..., int],
) -> None:
    hung_up = threading.Event()
    first = _park("hung-up", wait_ms=10_000, gone=hung_up.is_set)
    second = _park("still-there", wait_ms=4_000)

    hung_up.set()
    pk, start = _enqueue_and_time(enqueue_task)
    first["thread"].join(10)
    second["thread"].join(10)

    assert first["got"] == []  # a client that left is never handed a task
    assert [d.task.pk for d in second["got"]] == [pk]
    assert second["at"] - start < 2.0, f"woken after {second['at'] - start:.2f} s"


def test_wake__woken_claim_raises__next_parked_claimer_gets_the_task_at_once(
    enqueue_task: Callable[..., int], monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = threading.Event()
    real_claim = queue.claim  # the counting one

    def claim(*args: Any, **kwargs: Any) -> Any:
        if failing.is_set() and threading.current_thread().name == "failing":
            raise RuntimeError("database went away mid-claim")
        return real_claim(*args, **kwargs)

    monkeypatch.setattr(queue, "claim", claim)
    first = _park("failing", wait_ms=10_000)
    second = _park("still-there", wait_ms=4_000)

    failing.set()
    pk, start = _enqueue_and_time(enqueue_task)
    first["thread"].join(10)
    second["thread"].join(10)

    assert isinstance(first.get("raised"), RuntimeError)
    assert [d.task.pk for d in second["got"]] == [pk]
    assert second["at"] - start < 2.0, f"woken after {second['at'] - start:.2f} s"


def test_wake__claimers_of_other_queues_parked_first__own_claimer_woken_at_once(
    enqueue_task: Callable[..., int],
) -> None:
    others = []
    for i in range(3):
        out: dict[str, Any] = {}

        def run(out: dict[str, Any] = out, name: str = f"elsewhere-{i}") -> None:
            try:
                out["got"] = claim_wait([name], lease_ms=30_000, wait_ms=2_000)
            finally:
                connection.close()

        thread = threading.Thread(target=run, name=f"elsewhere-{i}")
        thread.start()
        others.append((thread, out))
        _wait_parked(f"elsewhere-{i}")
    mine = _park("mine", wait_ms=4_000)

    pk, start = _enqueue_and_time(enqueue_task)
    mine["thread"].join(10)
    for thread, _ in others:
        thread.join(10)

    assert [d.task.pk for d in mine["got"]] == [pk]
    assert mine["at"] - start < 2.0
    assert all(out["got"] == [] for _, out in others)

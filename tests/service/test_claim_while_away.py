"""Claims while this process's listener has lost the database (hub.away): they wait quietly,
without a look that would wait BROKER_DB_POOL_TIMEOUT for a connection, and answer 503 only if
the database is still away when their wait ends. And a claim woken for its queue whose look
fails while the listener hears (the pool renewing its connections) looks again soon."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import DatabaseError, OperationalError

from broker import longpoll
from broker.claimers import claim_log
from broker.longpoll import claim_wait
from broker.models import ClaimScope
from broker.parking.loop import Parked, Slot
from broker.wakeup import hub

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test says whether the database is away, not a listener thread; nor does one an
    earlier test of this process started (SQLite's poller would wake these claims too)."""
    hub.stop()
    monkeypatch.setattr(hub, "_ensure_thread", lambda: None)
    monkeypatch.setattr(hub, "away", False)


def _later(seconds: float, then: object) -> None:
    threading.Timer(seconds, then).start()  # type: ignore[arg-type]


def test_claim__database_away__no_query_at_all__503_at_the_end_of_its_wait(
    enqueue_task, django_assert_num_queries
) -> None:
    enqueue_task()
    hub.away = True
    started = time.monotonic()
    with django_assert_num_queries(0), pytest.raises(DatabaseError, match="cannot be reached"):
        claim_wait(None, lease_ms=1000, wait_ms=300)
    assert time.monotonic() - started >= 0.3  # it waited, quietly


def test_claim__database_back_during_its_wait__woken_and_handed_the_task(enqueue_task) -> None:
    pk = enqueue_task()
    hub.away = True

    def back() -> None:  # what the listener does when it reconnects
        hub.away = False
        hub.wake_all()

    started = time.monotonic()  # before the timer starts: its 0.2 s count from here at the latest
    _later(0.2, back)
    (got,) = claim_wait(None, lease_ms=1000, wait_ms=5000)
    assert got.task.pk == pk
    assert 0.2 <= time.monotonic() - started < 2.0  # woken, not at the end of its 5 s wait


def test_claim__parked_then_database_lost__503_only_because_it_is_still_away(enqueue_task) -> None:
    _later(0.1, lambda: setattr(hub, "away", True))
    with pytest.raises(DatabaseError):
        claim_wait(["empty"], lease_ms=1000, wait_ms=400)


def test_claim__parked_through_an_outage_that_ended__204() -> None:
    _later(0.1, lambda: setattr(hub, "away", True))
    _later(0.2, lambda: setattr(hub, "away", False))
    assert claim_wait(["empty"], lease_ms=1000, wait_ms=400) == []


def test_claim_notes__database_away__kept_in_memory_then_written(
    django_assert_num_queries,
) -> None:
    hub.away = True
    with django_assert_num_queries(0):
        claim_log.seen(["orders"])
    hub.away = False
    assert claim_log.flush() == 1
    assert ClaimScope.objects.filter(scope="orders").exists()


class _PoolRenewing:
    """queue.claim as a process sees it while its pool renews: the first `empty` looks find
    nothing (the task is not there yet), the next fails as a pool with no connection to give
    fails, then the pool is back. The listener hears meanwhile."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, empty: int = 1) -> None:
        self.calls = 0
        self._empty = empty
        self._claim = longpoll.queue.claim
        monkeypatch.setattr(longpoll.queue, "claim", self)
        monkeypatch.setattr(hub, "listening", True)

    def __call__(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        if self.calls <= self._empty:
            return []
        if self.calls == self._empty + 1:
            raise OperationalError("couldn't get a connection after 2.00 sec")
        return self._claim(*args, **kwargs)


def _dispatch(slot: Slot) -> list:
    """One dispatch of a claim the parking worker serves (5 s wait): it looks once, then parks
    (raises Parked) until woken or due."""
    return claim_wait(["q"], lease_ms=1000, wait_ms=5000, parking=slot)


# Outside a transaction: a look that fails inside one raises (the caller's to handle).
@pytest.mark.django_db(transaction=True)
def test_claim__woken_for_its_queue_then_its_look_fails__looks_again_soon_not_at_its_end(
    enqueue_task, monkeypatch: pytest.MonkeyPatch, settings
) -> None:
    settings.BROKER_DB_RECONNECT_MS = 200
    pk = enqueue_task(queue="q")
    looks = _PoolRenewing(monkeypatch, empty=2)  # a thread's claim looks, parks, looks again
    started = time.monotonic()
    _later(0.1, lambda: hub.wake("q", 1))  # the task's NOTIFY, heard by the listener
    (got,) = claim_wait(["q"], lease_ms=1000, wait_ms=5000)
    took = time.monotonic() - started
    assert got.task.pk == pk
    assert looks.calls == 4
    assert 0.3 <= took < 2.0, took  # one reconnect interval after the failed look


@pytest.mark.django_db(transaction=True)
def test_parked_claim__woken_for_its_queue_then_its_look_fails__due_again_soon(
    enqueue_task, monkeypatch: pytest.MonkeyPatch, settings
) -> None:
    # The same claim served by the parking worker.
    settings.BROKER_DB_RECONNECT_MS = 200
    pk = enqueue_task(queue="q")
    looks = _PoolRenewing(monkeypatch)
    slot = Slot()
    with pytest.raises(Parked) as parked:  # looked, nothing: due at the end of its wait
        _dispatch(slot)
    assert parked.value.due - time.monotonic() > 4
    hub.wake("q", 1)
    with pytest.raises(Parked) as parked:  # woken; its look fails
        _dispatch(slot)
    assert 0.1 < parked.value.due - time.monotonic() <= 0.2
    (got,) = _dispatch(slot)  # due: looks again
    assert got.task.pk == pk
    assert looks.calls == 3


@pytest.mark.django_db(transaction=True)
def test_claim__woken_for_every_queue_then_its_look_fails__waits_for_a_wake_or_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The listener's reconnection wakes every parked claim: were each to go back to a pool that
    # has nothing to give every interval, ten thousand of them would hold every thread.
    looks = _PoolRenewing(monkeypatch)
    slot = Slot()
    with pytest.raises(Parked):
        _dispatch(slot)
    hub.wake_all()
    with pytest.raises(Parked) as parked:
        _dispatch(slot)
    assert parked.value.due - time.monotonic() > 4
    assert looks.calls == 2

"""Claims while this process's listener has lost the database (hub.away): they wait quietly,
without a look that would wait BROKER_DB_POOL_TIMEOUT for a connection, and answer 503 only if
the database is still away when their wait ends."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import DatabaseError

from broker.claimers import claim_log
from broker.longpoll import claim_wait
from broker.models import ClaimScope
from broker.wakeup import hub

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test says whether the database is away, not a listener thread."""
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

"""Leases that ran out while the sweeper could not reach the database are held, not reclaimed,
until BROKER_OUTAGE_GRACE_MS after it is back: their live workers settle them first."""

from __future__ import annotations

import pytest

from broker import queue
from broker.models import ReclaimHold, Task
from broker.states import State
from broker.sweeper import OutageWatch, sweep_once

pytestmark = pytest.mark.django_db

GRACE_MS = 15_000


@pytest.fixture(autouse=True)
def _grace(settings) -> None:
    settings.BROKER_OUTAGE_GRACE_MS = GRACE_MS


def test_outage__lease_ran_out_meanwhile__held_through_the_grace_then_reclaimed(
    enqueue_task, claim_one, clock, moved
) -> None:
    pk = enqueue_task()
    claim_one(lease_ms=2000)
    watch = OutageWatch()
    watch.sweep()
    clock.advance(500)
    watch.failed()  # the database goes away...
    clock.advance(9500)
    watch.failed()
    clock.advance(100)  # ...and is back 10 s later; the lease ended 8 s ago
    watch.sweep()
    assert Task.objects.get(pk=pk).state == State.HANDED_OUT
    clock.advance(GRACE_MS - 1000)
    assert sweep_once().reclaimed == 0  # any sweeper honours the hold
    clock.advance(1100)
    assert watch.sweep().reclaimed == 1
    assert Task.objects.get(pk=pk).state == State.DELAYED
    assert moved() == {"enqueued": 1, "delivered": 1, "reclaimed": 1, "retried": 1}


def test_outage__worker_acks_after_it__the_held_lease_is_still_its_own(
    enqueue_task, claim_one, clock, moved
) -> None:
    pk = enqueue_task()
    delivery = claim_one(lease_ms=2000)
    watch = OutageWatch()
    watch.sweep()
    watch.failed()
    clock.advance(12_000)
    watch.sweep()  # back: the hold is recorded before anything is reclaimed
    clock.advance(5000)  # the worker's retried ack comes a few seconds later
    queue.ack(pk, lease_id=delivery.lease_id)
    assert Task.objects.get(pk=pk).state == State.DONE
    assert moved() == {"enqueued": 1, "delivered": 1, "acked": 1}


def test_outage__sweep_waited_for_its_connection_throughout__held_all_the_same(
    enqueue_task, claim_one, clock
) -> None:
    # No sweep failed: the next one waited for a connection from a pool reconnecting to the new
    # primary, and got one after it. The wait was the outage.
    pk = enqueue_task()
    claim_one(lease_ms=2000)
    watch = OutageWatch(interval_s=0.25)
    watch.sweep()
    clock.advance(10_000)
    assert watch.sweep().reclaimed == 0
    assert Task.objects.get(pk=pk).state == State.HANDED_OUT
    assert ReclaimHold.objects.count() == 1


def test_sweeps__a_second_apart__no_outage(enqueue_task, claim_one, clock) -> None:
    enqueue_task()
    claim_one(lease_ms=500)
    watch = OutageWatch(interval_s=0.25)
    watch.sweep()
    clock.advance(1000)
    assert watch.sweep().reclaimed == 1
    assert not ReclaimHold.objects.exists()


def test_outage__lease_that_ended_before_it__reclaimed_at_once(
    enqueue_task, claim_one, clock
) -> None:
    early = enqueue_task(queue="early")
    claim_one(lease_ms=1000, queues=["early"])
    late = enqueue_task(queue="late")
    claim_one(lease_ms=3000, queues=["late"])
    clock.advance(2000)
    since = clock.now()  # the last sweep that worked (the early lease was over by then)
    clock.advance(5000)
    queue.hold_reclaims(since, clock.now())
    assert queue.reclaim_expired() == 1
    states = dict(Task.objects.values_list("pk", "state"))
    assert (states[early], states[late]) == (State.DELAYED, State.HANDED_OUT)


def test_no_outage__no_hold__expired_leases_reclaimed_as_ever(
    enqueue_task, claim_one, clock
) -> None:
    enqueue_task()
    claim_one(lease_ms=1000)
    watch = OutageWatch()
    watch.sweep()
    clock.advance(1001)
    assert watch.sweep().reclaimed == 1
    assert not ReclaimHold.objects.exists()


def test_holds__pruned_an_hour_after_they_end(clock) -> None:
    queue.hold_reclaims(clock.now(), clock.now())
    clock.advance(GRACE_MS + 3_600_000 - 1000)
    sweep_once()
    assert ReclaimHold.objects.count() == 1
    clock.advance(2000)
    sweep_once()
    assert not ReclaimHold.objects.exists()

"""The wake-up hub's order across groups of waiters, and the parking loop on real sockets."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from broker.parking.loop import ParkedPoll, ParkingLoop, Slot
from broker.wakeup import Hub, Waiter


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Hub:
    h = Hub()
    monkeypatch.setattr(h, "_ensure_thread", lambda: None)  # no listener: wakes by hand
    return h


def test_hub__wake__longest_without_a_wake_first_across_queue_groups(hub: Hub) -> None:
    a1 = hub.park(frozenset({"a"}))
    every = hub.park(None)
    a2 = hub.park(frozenset({"a"}))
    b = hub.park(frozenset({"b"}))
    assert hub.wake("a", 2) == 2
    assert (a1.woken, every.woken, a2.woken) == (True, True, False)
    assert not b.woken
    # Woken ones went to the back; a2 has waited longest among those not yet woken.
    assert hub.wake("a", 5) == 1 and a2.woken
    hub.take(a1)
    assert hub.wake("a", 1) == 1 and every.woken and a1.woken


def test_hub__unpark__passes_an_unused_wake_to_the_next_waiter_and_counts(hub: Hub) -> None:
    first = hub.park(frozenset({"q"}))
    second = hub.park(frozenset({"q"}))
    hub.wake("q", 1)
    assert first.woken and hub.parked() == 2
    hub.unpark(first)  # never looked: its wake goes on
    assert second.woken and second.woken_for == "q" and hub.parked() == 1
    hub.unpark(second, hub.take(second))
    assert hub.parked() == 0
    hub.unpark(second)  # twice: nothing
    assert hub.parked() == 0


class _Wait:
    def __init__(self, waiter: Waiter, released: list[Waiter]) -> None:
        self.waiter, self._released = waiter, released

    def release(self) -> None:
        self._released.append(self.waiter)


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock


def _parked(
    loop: ParkingLoop, due: float, released: list[Waiter]
) -> tuple[ParkedPoll, Any, Waiter]:
    server, client = socket.socketpair()
    slot = Slot()
    waiter = Waiter(frozenset({"q"}))
    slot.wait = _Wait(waiter, released)
    poll = ParkedPoll(_Conn(server), None, {}, slot, None, due)
    loop.add(poll)
    return poll, client, waiter


def test_parking_loop__woken_due_and_hung_up_polls__each_handed_on_once() -> None:
    resumed: list[ParkedPoll] = []
    dropped: list[ParkedPoll] = []
    released: list[Waiter] = []
    loop = ParkingLoop(resume=resumed.append, drop=dropped.append)
    loop.start()
    try:
        woken, woken_client, woken_waiter = _parked(loop, time.monotonic() + 60, released)
        due, due_client, _ = _parked(loop, time.monotonic() + 0.3, released)
        gone, gone_client, gone_waiter = _parked(loop, time.monotonic() + 60, released)
        time.sleep(0.1)
        assert len(loop) == 3 and not resumed
        woken_waiter.signal()  # the hub's wake
        gone_client.close()  # a hang-up
        deadline = time.monotonic() + 5
        while (len(resumed) < 2 or not dropped) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert resumed == [woken, due]
        # The hung-up one left the hub (its wake passed on) and was closed, never resumed.
        assert dropped == [gone] and released == [gone_waiter]
        assert len(loop) == 0
        woken_waiter.signal()  # a second wake of a poll no longer parked: nothing
        time.sleep(0.05)
        assert resumed == [woken, due]
    finally:
        loop.stop()
        for poll in (woken, due, gone):
            poll.conn.sock.close()
        for client in (woken_client, due_client):
            client.close()

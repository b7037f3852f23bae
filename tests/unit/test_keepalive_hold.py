"""Holder over a socket pair: a thread waits for its connection's next request up to its hold, no
more threads than its share at once, none while requests queue, and none after a stop."""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from broker.parking.keepalive import Holder, hold_from_env


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        yield ours, theirs


@pytest.fixture
def other() -> Iterator[socket.socket]:
    """A second connection's socket (its peer open and silent)."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        yield ours


def _conn(sock: socket.socket, read_ahead: bytes = b"") -> Any:
    """What Holder reads of gunicorn's connection: its socket and its parser's read-ahead."""
    return SimpleNamespace(sock=sock, parser=SimpleNamespace(unreader=SimpleNamespace(
        buf=io.BytesIO(read_ahead))))  # fmt: skip


def _timed(holder: Holder, conn: Any, queued: int = 0) -> tuple[bool, float]:
    started = time.monotonic()
    got = holder.next_request(conn, queued)
    return got, time.monotonic() - started


def _in_thread(holder: Holder, conn: Any) -> tuple[threading.Thread, list[tuple[bool, float]]]:
    out: list[tuple[bool, float]] = []
    thread = threading.Thread(target=lambda: out.append(_timed(holder, conn)))
    thread.start()
    deadline = time.monotonic() + 5
    while holder.waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert holder.waiting == 1
    return thread, out


@pytest.mark.parametrize(("raw", "seconds"), [(None, 1.0), ("", 1.0), ("0", 0.0), ("2.5", 2.5)])
def test_hold_from_env__read(monkeypatch, raw, seconds) -> None:
    if raw is None:
        monkeypatch.delenv("GUNICORN_KEEPALIVE_HOLD", raising=False)
    else:
        monkeypatch.setenv("GUNICORN_KEEPALIVE_HOLD", raw)
    assert hold_from_env() == seconds


@pytest.mark.parametrize("raw", ["-1", "abc", "inf", "nan", "61", "1e12"])
def test_hold_from_env__bad__names_the_variable(monkeypatch, raw) -> None:
    monkeypatch.setenv("GUNICORN_KEEPALIVE_HOLD", raw)
    with pytest.raises(ValueError, match="GUNICORN_KEEPALIVE_HOLD must be a number of seconds"):
        hold_from_env()


def test_next_request_within_the_hold__true_as_it_comes(pair) -> None:
    ours, theirs = pair
    holder = Holder(10.0, 4)
    threading.Timer(0.1, lambda: theirs.sendall(b"GET /healthz HTTP/1.1\r\n")).start()
    got, took = _timed(holder, _conn(ours))
    assert got and 0.05 < took < 5
    assert holder.waiting == 0


def test_no_next_request__false_after_the_hold(pair) -> None:
    ours, _ = pair
    got, took = _timed(Holder(0.2, 4), _conn(ours))
    assert not got and 0.15 < took < 5


def test_client_hangs_up__true_so_that_the_read_ends_the_connection(pair) -> None:
    ours, theirs = pair
    theirs.close()
    got, took = _timed(Holder(10.0, 4), _conn(ours))
    assert got and took < 5


def test_read_ahead__true_at_once_even_with_no_share_left(pair) -> None:
    ours, _ = pair
    got, took = _timed(Holder(10.0, 0), _conn(ours, b"GET /healthz HTTP/1.1\r\n"))
    assert got and took < 1


def test_share_taken__the_next_thread_does_not_wait(pair, other) -> None:
    ours, theirs = pair
    holder = Holder(10.0, 1)
    thread, out = _in_thread(holder, _conn(ours))
    got, took = _timed(holder, _conn(other))
    assert not got and took < 1  # the share (1) is taken: to the loop at once
    theirs.sendall(b"G")
    thread.join(5)
    assert out[0][0] is True
    assert holder.waiting == 0


def test_requests_queued_for_a_thread__no_wait(pair) -> None:
    ours, _ = pair
    got, took = _timed(Holder(10.0, 4), _conn(ours), queued=1)
    assert not got and took < 1


def test_hold_zero__off(pair) -> None:
    ours, _ = pair
    got, took = _timed(Holder(0.0, 64), _conn(ours))
    assert not got and took < 1


def test_stop__ends_the_waits_and_starts_none(pair, other) -> None:
    ours, _ = pair
    holder = Holder(30.0, 4)
    thread, out = _in_thread(holder, _conn(ours))
    holder.stop()
    thread.join(5)
    assert out[0][0] is False and out[0][1] < 5  # not the 30 s hold
    got, took = _timed(holder, _conn(other))
    assert not got and took < 1

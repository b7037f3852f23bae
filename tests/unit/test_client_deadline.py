"""DeadlineSocket over a socket pair: a request's head has one deadline, each read of its body
another, and gunicorn's own bounded reads keep theirs."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from broker.parking.deadline import DeadlineSocket, cut_answer, timeout_from_env


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        yield ours, theirs


def test_head__a_byte_within_each_read_but_not_whole_in_time__cut(pair) -> None:
    ours, theirs = pair
    reader = DeadlineSocket(ours, 0.3)
    reader.start_request()
    got = b""
    started = time.monotonic()
    for _ in range(10):
        theirs.send(b"G")
        data = reader.recv(100)
        if not data:
            break
        got += data
        time.sleep(0.1)
    assert reader.cut == "head"
    assert 0.25 <= time.monotonic() - started < 1
    assert 2 <= len(got) <= 4
    assert 0 < ours.gettimeout() <= 0.3  # the write of an answer has a deadline too


def test_body__each_read_timed_on_its_own(pair) -> None:
    ours, theirs = pair
    reader = DeadlineSocket(ours, 0.3)
    reader.start_request()
    reader.head_read()
    for _ in range(4):  # 0.8 s in all, more than one timeout, never 0.3 s without a byte
        time.sleep(0.2)
        theirs.send(b"b")
        assert reader.recv(100) == b"b"
    assert reader.cut is None
    assert reader.recv(100) == b""  # then nothing for 0.3 s
    assert reader.cut == "body"
    reader.start_request()  # the next request starts uncut
    assert reader.cut is None


def test_gunicorns_own_shorter_timeout__raised_to_it(pair) -> None:
    ours, _ = pair
    reader = DeadlineSocket(ours, 5)
    reader.start_request()
    reader.head_read()
    reader.settimeout(0.1)  # as the drain of an unread body does
    assert reader.gettimeout() == 0.1
    with pytest.raises(TimeoutError):
        reader.recv(100)
    assert reader.cut is None
    reader.settimeout(None)  # gunicorn puts back what it found
    assert reader.gettimeout() is None
    assert ours.gettimeout() == 5  # and the socket is under the body's deadline again


@pytest.mark.parametrize(
    ("part", "status", "error"),
    [
        ("head", b"408 Request Timeout", "The request did not arrive whole within 30 s"),
        (
            "body",
            b"400 Bad Request",
            "The body stopped arriving for 30 s: the request was cut short",
        ),
    ],
)
def test_cut_answer__json_and_closing(part: str, status: bytes, error: str) -> None:
    head, _, body = cut_answer(part, 30).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 " + status + b"\r\n")
    assert b"Connection: close" in head and f"Content-Length: {len(body)}".encode() in head
    assert json.loads(body) == {"error": f"{error}; the connection is closed."}


@pytest.mark.parametrize(("raw", "seconds"), [(None, 30.0), ("", 30.0), ("2.5", 2.5), (" 1 ", 1.0)])
def test_timeout_from_env__read(monkeypatch, raw, seconds) -> None:
    if raw is None:
        monkeypatch.delenv("GUNICORN_CLIENT_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("GUNICORN_CLIENT_TIMEOUT", raw)
    assert timeout_from_env() == seconds


@pytest.mark.parametrize("raw", ["0", "-1", "abc", "inf", "nan"])
def test_timeout_from_env__bad__names_the_variable(monkeypatch, raw) -> None:
    monkeypatch.setenv("GUNICORN_CLIENT_TIMEOUT", raw)
    with pytest.raises(ValueError, match="GUNICORN_CLIENT_TIMEOUT must be a number of seconds"):
        timeout_from_env()

"""socket_gone: a parked claim sees its client hang up, over plain TCP and under TLS alike."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from broker import longpoll
from broker.longpoll import socket_gone
from tests.procs import self_signed_cert, tls_client_context
from tests.worker_fakes import wait_until


@pytest.fixture(scope="module")
def server_context(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    cert, key = self_signed_cert(tmp_path_factory.mktemp("tls"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


@contextmanager
def _pair(server_context: ssl.SSLContext | None) -> Iterator[tuple[socket.socket, socket.socket]]:
    """(the broker's end, the client's end) of one connection, TLS-wrapped when given a context;
    the handshake is done, as it is by the time a request is parked."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: dict[str, socket.socket] = {}

    def accept() -> None:
        conn, _ = listener.accept()
        accepted["sock"] = server_context.wrap_socket(conn, server_side=True) if server_context \
            else conn  # fmt: skip

    thread = threading.Thread(target=accept)
    thread.start()
    client = socket.create_connection(("127.0.0.1", port))
    if server_context:
        client = tls_client_context().wrap_socket(client, server_hostname="127.0.0.1")
    thread.join(10)
    server = accepted["sock"]
    try:
        yield server, client
    finally:
        for sock in (server, client, listener):
            sock.close()


def _hang_up_seen(
    context: ssl.SSLContext | None, say_goodbye: Callable[[socket.socket], None] = lambda c: None
) -> bool:
    """A connected client (not gone) says goodbye, then closes: whether socket_gone sees it go."""
    with _pair(context) as (server, client):
        gone = socket_gone(server)
        assert gone() is False
        say_goodbye(client)
        client.close()
        return wait_until(gone, 2.0)


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
def test_socket_gone__client_connected__not_gone(server_context: ssl.SSLContext, tls: bool) -> None:
    with _pair(server_context if tls else None) as (server, _client):
        gone = socket_gone(server)
        time.sleep(0.05)
        assert gone() is False


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
def test_socket_gone__client_closes__gone(server_context: ssl.SSLContext, tls: bool) -> None:
    assert _hang_up_seen(server_context if tls else None), "a hung-up client still looks connected"


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
def test_socket_gone__without_poll_rdhup__peek_still_sees_a_hang_up(
    server_context: ssl.SSLContext, tls: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(longpoll, "_GONE_EVENTS", 0)  # as on systems without POLLRDHUP
    assert _hang_up_seen(server_context if tls else None), "a hung-up client still looks connected"


def test_socket_gone__tls_client_says_close_notify_then_closes__gone(
    server_context: ssl.SSLContext,
) -> None:
    # Go's and curl's TLS close: an alert record first, then FIN. A peek sees the record's
    # bytes, never the end of the stream behind them.
    def close_notify(client: socket.socket) -> None:
        assert isinstance(client, ssl.SSLSocket)
        client.setblocking(False)
        try:
            client.unwrap()  # sends close_notify; the broker's end never answers it
        except (ssl.SSLWantReadError, OSError):
            pass

    seen = _hang_up_seen(server_context, close_notify)
    assert seen, "a client that closed TLS properly still looks connected"


def test_socket_gone__client_sends_more_bytes_but_stays__not_gone(
    server_context: ssl.SSLContext,
) -> None:
    # A pipelined next request is a client still there.
    with _pair(server_context) as (server, client):
        gone = socket_gone(server)
        client.sendall(b"GET /stats HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.05)
        assert gone() is False


def test_socket_gone__no_socket__never_gone() -> None:
    assert socket_gone(None)() is False

"""A TCP proxy in front of PostgreSQL that a test can cut and restore: a database outage for
some processes only, without stopping the PostgreSQL that other test runs share."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Proxy:
    """Forwards bind:<port> (127.0.0.1 unless given) to (host, port). While down, every
    connection through it is closed and new ones are accepted and closed at once (a server that
    went away). Frozen, the connections open then go silent and new ones pass (a host that
    vanished, the next one reached at the same address)."""

    def __init__(self, host: str, port: int, bind: str = "127.0.0.1", bind_port: int = 0) -> None:
        self.target = (host, port)
        self._listener = socket.create_server((bind, bind_port))
        self.port = self._listener.getsockname()[1]
        self._up = threading.Event()
        self._up.set()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False
        self._accepted = self._frozen_before = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, user: str, name: str) -> str:
        return f"postgres://{user}@127.0.0.1:{self.port}/{name}"

    def down(self) -> None:
        """Cut every connection through the proxy and refuse new ones until up()."""
        self._up.clear()
        with self._lock:
            sockets, self._open = self._open, set()
        for sock in sockets:
            _close(sock)

    def up(self) -> None:
        self._up.set()

    def freeze(self) -> None:
        """The connections open now forward nothing more, either way, and are not closed."""
        self._frozen_before = self._accepted

    def close(self) -> None:
        self._closed = True
        self.down()
        _close(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._up.is_set():
                _close(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._open.update((client, server))
                self._accepted += 1
                number = self._accepted
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b, number), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, number: int) -> None:
        try:
            while data := src.recv(65536):
                if number > self._frozen_before:
                    dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            self._open.discard(src)
            self._open.discard(dst)
        _close(src)
        _close(dst)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


@contextmanager
def proxy_to(host: str, port: int) -> Iterator[Proxy]:
    proxy = Proxy(host, port)
    try:
        yield proxy
    finally:
        proxy.close()


if __name__ == "__main__":  # tests/proxy.py LISTEN_HOST:PORT TARGET_HOST:PORT (in another netns)
    import sys
    import time

    (bind, _, bind_port), (to, _, to_port) = (arg.rpartition(":") for arg in sys.argv[1:3])
    Proxy(to, int(to_port), bind, int(bind_port))
    sys.stdout.write("listening\n")
    sys.stdout.flush()
    while True:
        time.sleep(3600)

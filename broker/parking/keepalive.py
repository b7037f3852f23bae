"""A request's thread waits a moment for the next request on its keep-alive connection.

gthread hands every kept-alive connection back to its main loop after each answer: the loop's
selector watches it, and the next request goes through the thread pool's queue to a thread again.
That is two thread hand-offs a request through a loop that also accepts and dispatches every
other connection, and on these hosts about a quarter of the server's CPU for a client sending
request after request (docs/performance.md). Most clients send their next request soon: a worker
acks, then claims; a producer enqueues in a loop; a woken poll's worker acks. So the thread that
answered waits for it, up to `hold_s`, and serves it itself. Past that, or while a quarter of the
threads already wait so, or while requests queue for a thread, the connection goes to the loop
as before: waiting threads never stand between a request and a thread for long.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Any

from broker.parking.deadline import seconds_from_env

DEFAULT_HOLD_S = 1.0
# A longer hold would outlast gunicorn's own keep-alive (75 s) for nothing.
MOST_HOLD_S = 60.0
# At most threads // SHARE threads wait for a next request at once.
SHARE = 4


def hold_from_env() -> float:
    """GUNICORN_KEEPALIVE_HOLD as seconds, 0 for off (ValueError names the variable)."""
    return seconds_from_env(
        "GUNICORN_KEEPALIVE_HOLD", DEFAULT_HOLD_S, zero_is_off=True, most=MOST_HOLD_S
    )


class Holder:
    """Lets up to `most` threads at once wait up to `hold_s` for their connection's next request."""

    def __init__(self, hold_s: float, most: int) -> None:
        self.hold_ms = hold_s * 1000
        self.most = most if hold_s > 0 else 0
        self._lock = threading.Lock()
        self.waiting = 0
        # Readable once stop() wrote to it, in every wait at once: a stopping worker's threads
        # do not sit out their hold.
        self._stop_r, self._stop_w = os.pipe()

    def stop(self) -> None:
        """End every wait now and start none (a signal handler may call it)."""
        self.most = 0
        try:
            os.write(self._stop_w, b"\0")
        except OSError:  # full: written already
            pass

    def next_request(self, conn: Any, queued: int) -> bool:
        """Whether `conn` (just answered, kept alive) has its next request to read, waiting at most
        hold_s; False at once when it may not wait (`queued`: requests waiting for a thread)."""
        if conn.parser.unreader.buf.getvalue():
            return True  # read ahead with the last body: the socket may not look readable again
        pending = getattr(conn.sock, "pending", None)  # bytes a TLS layer decrypted already
        if pending is not None and pending():
            return True
        with self._lock:
            if self.waiting >= self.most or queued:
                return False
            self.waiting += 1
        try:
            fd = conn.sock.fileno()
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            poller.register(self._stop_r, select.POLLIN)
            # Readable also when the client hangs up: the read then ends the connection.
            return any(ready == fd for ready, _ in poller.poll(self.hold_ms))
        except (OSError, ValueError):  # closed meanwhile: the loop's path closes it
            return False
        finally:
            with self._lock:
                self.waiting -= 1

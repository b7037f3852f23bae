"""gunicorn's gthread worker, with parked long-polls held by a loop instead of threads.

A claim that must wait raises `broker.parking.loop.Parked`: the request's thread goes back to the
pool, and the connection to the process's ParkingLoop (an epoll set). Woken, due, or at the end of
its wait, the poll is served again in a thread from its kept environ, and answers as any
request does (the access log, keep-alive, the next request on the connection). So a node holds
as many idle workers as it has file descriptors, while `threads` bounds only the requests being
worked on. HTTP/2 streams are served as gthread serves them (their claims wait in the thread).

A request is read with deadlines (broker.parking.deadline): a client that stalls mid-request
gets its thread back to the pool after GUNICORN_CLIENT_TIMEOUT seconds. A connection the server
closes lingers in the main loop's selector for its client's FIN instead of blocking that loop.
A kept-alive connection's next request, when it comes within GUNICORN_KEEPALIVE_HOLD, is served
by the thread that answered the last one (broker.parking.keepalive), not through that loop.
"""

from __future__ import annotations

import errno
import gc
import io
import selectors
import socket
import sys
import time
from collections import deque
from datetime import datetime
from functools import partial
from typing import Any

from gunicorn import util
from gunicorn.http import wsgi
from gunicorn.workers.gthread import ThreadWorker

from broker.parking.deadline import DeadlineConn, cut_answer, timeout_from_env
from broker.parking.keepalive import SHARE, Holder, hold_from_env
from broker.parking.loop import ENVIRON_KEY, Parked, ParkedPoll, ParkingLoop, Slot

# Requests queued for a thread past which polls whose wait ended wait their turn in the loop.
BUSY_QUEUE = 16
# How long a connection the server closes waits for the client to close its end (gunicorn's
# graceful close), and how much of what the client still sends is read at a time.
LINGER_S = 2.0
LINGER_BYTES = 65536


def _peer(conn: Any) -> str:
    client = conn.client
    return f"{client[0]}:{client[1]}" if isinstance(client, tuple) else str(client)


class ParkingWorker(ThreadWorker):
    def init_process(self) -> None:
        self.client_timeout_s = timeout_from_env()
        self.holder = Holder(hold_from_env(), self.cfg.threads // SHARE)
        self.lingering: deque[tuple[float, socket.socket]] = deque()
        self.parking = ParkingLoop(resume=self._resume, drop=self._drop, busy=self._busy)
        self.parking.start()
        super().init_process()  # runs the worker's loop until it stops

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.holder.stop()
        super().handle_exit(sig, frame)

    def handle_quit(self, sig: int, frame: Any) -> None:
        self.holder.stop()
        super().handle_quit(sig, frame)

    def load_wsgi(self) -> None:
        super().load_wsgi()
        # Django's modules, settings and URL patterns live as long as the process: out of the
        # collector's sight, a full collection walks only what requests made. Measured: 48 ms
        # for Django's 81 000 objects alone, 83 ms beside 5000 parked polls' worth, on a quiet
        # core; every request thread waits that long.
        gc.freeze()

    # -- the loop's callbacks (its thread) ----------------------------------------------------

    def _resume(self, poll: ParkedPoll) -> None:
        conn = poll.conn
        conn.broker_poll = poll
        try:
            fs = self.tpool.submit(self.handle, conn)
        except RuntimeError:  # the pool is shut down: the worker is exiting
            # Not slot.release(): a wake calls this under the hub's lock, which unpark takes.
            self._drop(poll)
            return
        fs.add_done_callback(lambda fut: self.method_queue.defer(self.finish_request, conn, fut))

    def _busy(self) -> bool:
        return self._queued() >= BUSY_QUEUE

    def _queued(self) -> int:
        """Requests waiting for a thread (ThreadPoolExecutor's queue: no public size)."""
        return int(self.tpool._work_queue.qsize())

    def _drop(self, poll: ParkedPoll) -> None:
        self.method_queue.defer(self._close_parked, poll.conn)

    def _close_parked(self, conn: Any) -> None:
        self.nr_conns -= 1
        conn.close()

    def accept(self, listener: Any) -> None:
        """gthread's accept, its connections read with deadlines."""
        try:
            client_sock, client_addr = listener.accept()
            self.nr_conns += 1
            client_sock.setblocking(True)
            conn = DeadlineConn(self.cfg, client_sock, client_addr, listener.getsockname())
            conn.timeout_s = self.client_timeout_s
            self.enqueue_req(conn)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise

    # -- a request's thread -------------------------------------------------------------------

    def handle(self, conn: Any) -> Any:
        while True:
            result = self._handle_once(conn)
            if result is not True or not self.alive or conn.is_http2:
                return result
            if not self.holder.next_request(conn, self._queued()):
                return result  # to the main loop's poller, kept alive

    def _handle_once(self, conn: Any) -> Any:
        poll = getattr(conn, "broker_poll", None)
        if poll is None:
            result = super().handle(conn)
            if conn.cut is not None:
                self._cut(conn, conn.cut)
        else:
            conn.broker_poll = None
            try:
                result = self._serve_again(conn, poll)
            finally:
                self.parking.served(poll)
        if isinstance(result, ParkedPoll):
            self.parking.add(result)
        return result

    def finish_request(self, conn: Any, fs: Any) -> None:
        if fs.cancelled() or fs.exception() is not None:
            super().finish_request(conn, fs)
        elif isinstance(fs.result(), ParkedPoll):
            pass  # the parking loop holds the connection now
        elif not fs.result():
            self.nr_conns -= 1
            self._linger(conn.sock)
        else:
            super().finish_request(conn, fs)

    # -- closing without waiting on this loop -------------------------------------------------

    def _linger(self, sock: socket.socket) -> None:
        """gthread's graceful close (RFC 9112 9.6: FIN, then read until the client closes, so
        that the close sends no RST ahead of the answer) without waiting for the client here:
        gthread waited up to 2 s on this loop, which accepts and dispatches every connection of
        the process, for each client that kept its end open (found from outside), a stalled one
        whose request was cut included."""
        try:
            sock.shutdown(socket.SHUT_WR)
            sock.setblocking(False)
        except OSError:
            sock.close()
            return
        if self._drained(sock):
            sock.close()
            return
        self.poller.register(sock, selectors.EVENT_READ, partial(self._on_lingering, sock))
        self.lingering.append((time.monotonic() + LINGER_S, sock))

    def _on_lingering(self, sock: socket.socket, _fileobj: Any = None) -> None:
        if self._drained(sock):
            self.poller.unregister(sock)
            sock.close()

    @staticmethod
    def _drained(sock: socket.socket) -> bool:
        """Read what the client sent (up to LINGER_BYTES at a time); True once it closed its
        end, sent more than that, or the socket failed: the socket may close."""
        read = 0
        try:
            while read < LINGER_BYTES:
                data = sock.recv(4096)
                if not data:
                    break
                read += len(data)
        except BlockingIOError:
            return False
        except OSError:
            pass
        return True

    def murder_keepalived(self, force: bool = False) -> None:
        super().murder_keepalived(force)
        now = time.monotonic()
        while self.lingering and (force or self.lingering[0][0] <= now):
            _, sock = self.lingering.popleft()
            if sock.fileno() != -1:  # not closed by _on_lingering meanwhile
                self.poller.unregister(sock)
                sock.close()

    def _cut(self, conn: Any, part: str) -> None:
        """Log a request whose head or body stopped coming in time, and answer it when no view
        did (a head: 408; a chunked body, read before the views: 400), best effort: the
        connection closes either way."""
        what = "head did not arrive whole within" if part == "head" else "body stopped for"
        self.log.info(
            "closed a connection from %s: its request's %s %g s",
            _peer(conn), what, self.client_timeout_s,
        )  # fmt: skip
        if conn.answered:
            return
        try:
            conn.sock.setblocking(False)
            conn.sock.send(cut_answer(part, self.client_timeout_s))
        except OSError:
            pass

    def _keepalive_after(self, conn: Any, keepalive: Any) -> Any:
        if conn.cut:
            return False  # where the next request would start is unknown
        if isinstance(keepalive, ParkedPoll):
            # What the view did not read of the body is drained now, or the connection closes
            # after the answer.
            keepalive.keepalive = super()._keepalive_after(conn, True)
            return keepalive
        return super()._keepalive_after(conn, keepalive)

    def handle_request(self, req: Any, conn: Any) -> Any:
        if conn.reader is not None:
            conn.reader.head_read()  # the body's reads are timed one by one from here
        return self._serve(req, conn, None)

    def _serve_again(self, conn: Any, poll: ParkedPoll) -> Any:
        """A parked poll's next dispatch; errors as gthread's handle() treats them."""
        try:
            conn.sock.settimeout(self.client_timeout_s)  # the answer's write, as any answer's
            keepalive = self._serve(poll.req, conn, poll)
            if isinstance(keepalive, ParkedPoll) or not keepalive:
                return keepalive
            return poll.keepalive
        except OSError:
            return False
        except StopIteration:
            return False
        except Exception as exc:
            self.handle_error(poll.req, conn.sock, conn.client, exc)
            return False

    def _serve(self, req: Any, conn: Any, poll: ParkedPoll | None) -> Any:
        """gthread's handle_request, able to park: ParkedPoll when the claim parked, else
        whether the connection stays open."""
        environ: dict[str, Any] = {}
        resp = None
        parked = False
        try:
            if poll is None:
                self.cfg.pre_request(self, req)
                started = datetime.now()
                resp, environ = wsgi.create(req, conn.sock, conn.client, conn.server, self.cfg)
                environ["wsgi.multithread"] = True
                slot = environ[ENVIRON_KEY] = Slot()
                self.nr += 1
                if self.nr >= self.max_requests:
                    if self.alive:  # type: ignore[has-type]
                        self.log.info("Autorestarting worker after current request.")
                        self.alive = False
                    resp.force_close()
            else:
                started, environ, slot = poll.started, poll.environ, poll.slot
                resp = wsgi.Response(req, conn.sock, self.cfg)
            if not self.alive or not self.cfg.keepalive:
                resp.force_close()
            elif len(self.keepalived_conns) >= self.max_keepalived:
                resp.force_close()
            try:
                respiter = self.wsgi(environ, resp.start_response)
            except Parked as park:
                parked = True
                if poll is None:
                    # Its body is not kept (Slot): what the claim needs of it is in its slot.
                    environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(), "0"
                    return ParkedPoll(conn, req, environ, slot, started, park.due)
                poll.due = park.due
                return poll
            if resp.status_code == 413 or conn.cut:
                # The body was refused unread, or stopped coming: what is left of it would be
                # read as the next request, so the connection closes, and the answer says so.
                resp.force_close()
            try:
                if isinstance(respiter, environ["wsgi.file_wrapper"]):
                    resp.write_file(respiter)
                else:
                    for item in respiter:
                        resp.write(item)
                resp.close()
            finally:
                conn.answered = resp.headers_sent
                self.log.access(resp, req, environ, datetime.now() - started)
                if hasattr(respiter, "close"):
                    respiter.close()
            if resp.should_close():
                self.log.debug("Closing connection.")
                return False
        except TimeoutError:
            # The client took nothing of the answer for client_timeout_s: not an error of ours.
            self.log.info("closed a connection from %s: it did not read its answer", _peer(conn))
            return False
        except OSError:
            util.reraise(*sys.exc_info())
        except (Exception, SystemExit):
            if resp and resp.headers_sent:
                self.log.exception("Error handling request")
                util.close_graceful(conn.sock)
                raise StopIteration() from None
            raise
        finally:
            if not parked:
                # A claim that ended without reaching claim_wait's own unpark (an error before
                # it, on a later dispatch) must not stay in the hub, swallowing wake-ups.
                slot_of = environ.get(ENVIRON_KEY)
                if isinstance(slot_of, Slot):
                    slot_of.release()
                try:
                    self.cfg.post_request(self, req, environ, resp)
                except Exception:
                    self.log.exception("Exception in post_request hook")
        return True

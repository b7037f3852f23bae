"""gunicorn settings of the bundled project: `queue-broker serve` runs gunicorn with them, and
`gunicorn` alone in a checkout's root reads them through gunicorn.conf.py.

Threads (gthread), not async, so Django and DRF stay plain synchronous code; but a parked long-poll
holds no thread: the parking worker (broker/parking/worker.py) hands its connection to one
epoll loop per process until it is woken or its wait ends, and a thread serves it again then.
Keep-alive connections between requests wait in gunicorn's poller, not in a thread either
(after at most a second in the thread that answered, for a quarter of the threads at most). So
`threads` bounds the requests being worked on at once (2 x 256), and `worker_connections` the
connections a process holds, parked polls included: 2 x 12 000 (docs/operations.md, "Idle
workers"), each one a file descriptor, hence the open-file limit raised at start.
"""

import os
import resource
from typing import Any

from broker.api import gunicorn_errors
from broker.parking.deadline import timeout_from_env
from broker.parking.keepalive import hold_from_env

# Even gunicorn's own answers (request line over limit_request_line: 414, bad headers: 400/431)
# are JSON, as API.md wants of every error.
gunicorn_errors.install()

wsgi_app = "queueproject.wsgi:application"
# Loopback unless told otherwise: the API is open until tokens are set (API.md, BROKER_BIND).
bind = os.environ.get("BROKER_BIND", "127.0.0.1:8080")
worker_class = "broker.parking.worker.ParkingWorker"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("GUNICORN_THREADS", "256"))
# The master imports Django and the app once and forks the workers from it: a worker starts in
# milliseconds, not ~1 s of CPU each, and shares the imported code's memory. Importing opens
# no database connection and starts no thread: the worker (or its first request) makes those.
# The workers also share what the master mapped before forking: when one loses a PostgreSQL
# connection, the others renew their pools too (broker/dbgate.py). A code change then needs a
# restart, not a HUP.
preload_app = True
# A stalled client's thread comes back after GUNICORN_CLIENT_TIMEOUT seconds (30; the worker
# reads it, broker/parking/deadline.py); read here too, so a bad value stops the start at once.
timeout_from_env()
# A thread waits up to GUNICORN_KEEPALIVE_HOLD seconds (1; 0: off) for its keep-alive
# connection's next request before handing it to gunicorn's loop (broker/parking/keepalive.py).
hold_from_env()
worker_connections = int(os.environ.get("GUNICORN_WORKER_CONNECTIONS", "12000"))
# Open files a process may hold: each connection is one, plus the pool's, logs and pipes.
OPEN_FILES = worker_connections + 1000
# Long enough for a parked claim (30 s at most) to answer before a graceful stop ends.
graceful_timeout = 35
timeout = 60
keepalive = 75
accesslog = os.environ.get("GUNICORN_ACCESS_LOG") or None
# gunicorn's control socket (gunicornc) only where a path is given: its default, one path in the
# user's home, is taken over by every gunicorn the user starts on the machine, and its thread
# is stopped and started again around each fork of a worker.
control_socket = os.environ.get("GUNICORN_CONTROL_SOCKET", "")
control_socket_disable = not control_socket
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")


def on_starting(server: object) -> None:
    """Raise the soft open-file limit (inherited by the workers) toward OPEN_FILES, as far as the
    hard limit allows; the default soft limit of 1024 would refuse connections past ~1000."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = OPEN_FILES if hard == resource.RLIM_INFINITY else min(OPEN_FILES, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def when_ready(server: Any) -> None:
    """Once listening: warn when the broker is reachable from other machines with DEBUG on or
    without tokens (broker.W005 and W006)."""
    from broker.checks import warn_exposed

    warn_exposed(server)

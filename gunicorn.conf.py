"""gunicorn settings: `gunicorn` alone, in the repo root, serves the broker on :8080.

Threads (gthread), not async: a parked long-poll is a thread blocked on an Event, which costs no
CPU and no database connection (it gives its pooled connection back while it waits), and Django and
DRF stay plain synchronous code. Keep-alive connections between requests wait in gunicorn's poller,
not in a thread. Each process serves `threads` requests at once, parked ones included, so
2 x 256 leaves room for hundreds of parked workers and the producers beside them.
"""

import os

from broker.api import gunicorn_errors

# Even gunicorn's own answers (request line over limit_request_line: 414, bad headers: 400/431)
# are JSON, as API.md wants of every error.
gunicorn_errors.install()

wsgi_app = "queueproject.wsgi:application"
bind = os.environ.get("BROKER_BIND", "0.0.0.0:8080")
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("GUNICORN_THREADS", "256"))
worker_connections = 2000
# Long enough for a parked claim (30 s at most) to answer before a graceful stop ends.
graceful_timeout = 35
timeout = 60
keepalive = 75
accesslog = os.environ.get("GUNICORN_ACCESS_LOG") or None
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")

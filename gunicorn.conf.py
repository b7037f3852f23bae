"""gunicorn settings: `gunicorn` alone, in the repo root, serves the broker on BROKER_BIND
(127.0.0.1:8080). They live in the package (queueproject/gunicorn_conf.py), so that an installed
queue-broker's `queue-broker serve` runs with the very same ones."""

from queueproject.gunicorn_conf import *  # noqa: F403
from queueproject.gunicorn_conf import on_starting, when_ready  # noqa: F401 -- hooks gunicorn looks up

"""WSGI entry point: gunicorn serves `queueproject.wsgi:application`."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueproject.settings")

_human = get_wsgi_application()  # sets Django up; the full middleware stack

from broker.checks import require_secret_key, warn_at_start  # noqa: E402 -- needs Django set up

# gunicorn and runserver refuse to start in production mode without a key.
require_secret_key()
warn_at_start()

from django.urls import resolve  # noqa: E402 -- needs Django set up

from broker.api.wsgi import ApiHandler, dispatcher  # noqa: E402 -- needs Django set up

application = dispatcher(ApiHandler(), _human)

# The URLconf, and with it every view, serializer and DRF setting, imported at start: Django
# imports it at a process's first request, which took 0.2-0.3 s of CPU (the first health check
# after a restart waited that long in each process), and done here it is also before the
# parking worker's gc.freeze().
resolve("/healthz")

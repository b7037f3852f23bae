"""WSGI entry point: gunicorn serves `queueproject.wsgi:application`."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueproject.settings")

_human = get_wsgi_application()  # sets Django up; the full middleware stack

from broker.checks import require_secret_key, warn_at_start  # noqa: E402 -- needs Django set up

# gunicorn and runserver refuse to start in production mode without a key.
require_secret_key()
warn_at_start()

from broker.api.wsgi import ApiHandler, dispatcher  # noqa: E402 -- needs Django set up

application = dispatcher(ApiHandler(), _human)

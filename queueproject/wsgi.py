"""WSGI entry point: gunicorn serves `queueproject.wsgi:application`."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueproject.settings")

application = get_wsgi_application()

"""Django app config of the workers app."""

from django.apps import AppConfig


class WorkersConfig(AppConfig):
    """Workers: HTTP clients of the broker; no models."""

    name = "workers"
    verbose_name = "Workers"

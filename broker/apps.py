"""The broker app."""
from django.apps import AppConfig


class BrokerConfig(AppConfig):
    name = "broker"
    verbose_name = "Broker"
    default_auto_field = "django.db.models.BigAutoField"

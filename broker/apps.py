"""The broker app."""
from django.apps import AppConfig


class BrokerConfig(AppConfig):
    name = "broker"
    verbose_name = "Broker"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from broker import dbpool

        dbpool.install()

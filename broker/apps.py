"""The broker app."""
from django.apps import AppConfig


class BrokerConfig(AppConfig):
    name = "broker"
    verbose_name = "Broker"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from broker import dbpool

        connection_created.connect(dbpool.use_cheap_check, dispatch_uid="broker-cheap-check")

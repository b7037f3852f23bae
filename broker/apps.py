"""The broker app."""

from django.apps import AppConfig


class BrokerConfig(AppConfig):
    name = "broker"
    verbose_name = "Broker"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings
        from django.core import checks as django_checks
        from django.db.backends.signals import connection_created

        from broker import checks, dbpool
        from contract.conf import broker_settings

        dbpool.prepare(settings.DATABASES, broker_settings.BROKER_DB_RECONNECT_MS)
        connection_created.connect(dbpool.tune_pool, dispatch_uid="broker-tune-pool")
        django_checks.register(checks.open_api, django_checks.Tags.security, deploy=True)
        django_checks.register(checks.secret_key_set, django_checks.Tags.security, deploy=True)
        django_checks.register(checks.sqs_credentials_unused, django_checks.Tags.security)
        django_checks.register(checks.settings_valid)
        django_checks.register(checks.body_limits)
        django_checks.register(checks.sqlite_immediate, django_checks.Tags.database, deploy=True)
        self._watch_tokens()

    def _watch_tokens(self) -> None:
        """A token made, changed or deleted in this process is seen by it at once (the others
        revalidate within a second: broker.tokens.auth)."""
        from django.db.models.signals import post_delete, post_save

        from broker.models import AccessToken
        from broker.tokens import auth

        def changed(**kwargs: object) -> None:
            auth.bump()

        post_save.connect(changed, sender=AccessToken, weak=False, dispatch_uid="broker-tokens")
        post_delete.connect(changed, sender=AccessToken, weak=False, dispatch_uid="broker-tok-d")

"""System checks for deployment (`manage.py check --deploy`) and the web server's start-up guard."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.core.exceptions import ImproperlyConfigured

from contract.conf import broker_settings

log = logging.getLogger(__name__)

MISSING_KEY_MESSAGE = "SECRET_KEY must be set in the environment when DEBUG is off."


def _secret_key_missing() -> bool:
    try:
        return not settings.SECRET_KEY
    except ImproperlyConfigured:  # Django refuses to hand out an empty key
        return True


def open_api(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """broker.W001: without BROKER_API_TOKENS anyone who reaches the broker drives it."""
    if broker_settings.BROKER_API_TOKENS:
        return []
    return [
        Warning(
            "BROKER_API_TOKENS is empty: the API is open, so anyone who can reach the broker "
            "can enqueue, claim, settle, cancel and requeue tasks and read their payloads.",
            hint="Set BROKER_API_TOKENS=<token>[,<token>...] and give workers and producers "
            "BROKER_API_TOKEN.",
            id="broker.W001",
        )
    ]


def sqs_credentials_unused(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """broker.W002: SQS access keys given while the API is open, so nothing checks them."""
    if not broker_settings.BROKER_SQS_CREDENTIALS or broker_settings.BROKER_API_TOKENS:
        return []
    return [
        Warning(
            "BROKER_SQS_CREDENTIALS is set but BROKER_API_TOKENS is empty: the API is open, so "
            "SQS requests are not asked for a signature and the credentials are ignored.",
            hint="Set BROKER_API_TOKENS to require signed SQS requests (and bearer tokens on "
            "the native API), or drop BROKER_SQS_CREDENTIALS.",
            id="broker.W002",
        )
    ]


def warn_at_start() -> None:
    """Log the warnings a deployment should not miss when the web server starts (gunicorn does
    not run Django's system checks)."""
    for message in sqs_credentials_unused():
        log.warning("%s (%s) %s", message.msg, message.id, message.hint)


def secret_key_set(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """broker.E001: production mode without a SECRET_KEY (the web server would not start)."""
    if settings.DEBUG or not _secret_key_missing():
        return []
    return [
        Error(
            MISSING_KEY_MESSAGE,
            hint="Give it 50 or more random characters; the web server refuses to start "
            "without it.",
            id="broker.E001",
        )
    ]


def require_secret_key() -> None:
    """Called where the broker starts serving (WSGI): what signs sessions and CSRF tokens needs
    a key, and finding out at start beats a 500 on the first admin page."""
    if _secret_key_missing():
        raise ImproperlyConfigured(MISSING_KEY_MESSAGE)

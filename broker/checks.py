"""System checks for deployment (`manage.py check --deploy`) and the web server's start-up guard."""

from __future__ import annotations

import ipaddress
import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.core.exceptions import ImproperlyConfigured

from contract.conf import DEFAULTS, broker_settings

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
            "can enqueue, claim, settle, cancel and requeue tasks and read their payloads "
            "(unless an access token exists in the database: docs/tenants.md).",
            hint="Set BROKER_API_TOKENS=<token>[,<token>...], or make access tokens with "
            "`manage.py createtoken`, and give workers and producers BROKER_API_TOKEN.",
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


# What each BROKER_* setting must be when a project's settings give it (contract/conf.py has the
# defaults): (type, least) for whole numbers, a type for the others; "texts" is a list or tuple of
# strings. A string where a list belongs would be read one character at a time: BROKER_API_TOKENS
# = "secret" would let in anyone sending "s".
_WHOLE = {
    "BROKER_SWEEP_INTERVAL_MS": 1,
    "BROKER_RETRY_BASE_MS": 0,
    "BROKER_RETRY_MAX_MS": 0,
    "BROKER_OUTAGE_GRACE_MS": 0,
    "BROKER_HISTORY_MINUTES": 0,
    "BROKER_HISTORY_HOURS": 0,
    "BROKER_MAX_SCHEDULES": 0,
    "BROKER_MAX_BODY_BYTES": 1,
    "BROKER_SQLITE_POLL_MS": 1,
    "BROKER_DB_RECONNECT_MS": 1,
}
_TEXTS = (
    "BROKER_API_TOKENS",
    "BROKER_TASKS_ALLOWED",
    "BROKER_WORKER_HANDLERS",
    "BROKER_FETCH_ALLOWED_NETWORKS",
)


def _setting_problem(name: str, value: Any) -> str | None:
    if name in _WHOLE:
        least = _WHOLE[name]
        if type(value) is not int or value < least:
            return f"a whole number of at least {least}"
    elif name in _TEXTS:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            return 'a list of strings (["a", "b"]), not one string'
    elif name == "BROKER_SQS_CREDENTIALS":
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and v for k, v in value.items()
        ):
            return 'a dict {"access key id": "secret", ...}'
    elif name in ("BROKER_RETENTION", "BROKER_EVENT_RETENTION"):
        if not isinstance(value, timedelta) or value < timedelta(0):
            return "a datetime.timedelta (timedelta(0): kept forever)"
    return None


def settings_valid(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """broker.E002: a BROKER_* setting given in a shape the broker cannot use; broker.E003:
    USE_TZ off (the broker's times are aware UTC ones: leases, delays, the API's timestamps)."""
    problems = []
    if not settings.USE_TZ:
        problems.append(
            Error(
                "USE_TZ is False: the broker keeps and compares aware UTC times.",
                hint="Set USE_TZ = True (startproject's default).",
                id="broker.E003",
            )
        )
    for name in DEFAULTS:
        if not hasattr(settings, name):
            continue  # the default (contract/conf.py)
        value = getattr(settings, name)
        wanted = _setting_problem(name, value)
        if wanted:
            problems.append(
                Error(f"{name} must be {wanted}; it is {value!r:.80}.", id="broker.E002")
            )
    return problems


def body_limits(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """broker.W003: Django's own body cap below BROKER_MAX_BODY_BYTES: bodies the API accepts would
    be refused by Django (a 400) rather than served. (SQS requests, up to 3 MiB, answer a 413 that
    names DATA_UPLOAD_MAX_MEMORY_SIZE past it: Django's default 2.5 MiB holds all but the largest
    batches, so no warning for them.)"""
    cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    needed = broker_settings.BROKER_MAX_BODY_BYTES
    if isinstance(needed, int) and cap is not None and cap < needed:
        return [
            Warning(
                f"DATA_UPLOAD_MAX_MEMORY_SIZE ({cap}) is below BROKER_MAX_BODY_BYTES ({needed}): "
                "Django would refuse the larger bodies the broker accepts with a 400.",
                hint=f"Set DATA_UPLOAD_MAX_MEMORY_SIZE = {needed} (or more) in your settings.",
                id="broker.W003",
            )
        ]
    return []


def sqlite_immediate(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """broker.W004 (deploy): the broker on SQLite without IMMEDIATE transactions. Claims and
    enqueues read, then write: two at once in SQLite's default (deferred) mode meet as a lock
    upgrade that fails ("database is locked", answered 503) instead of waiting its turn."""
    return sqlite_warnings(settings.DATABASES.get("default", {}))


def sqlite_warnings(database: dict[str, Any]) -> list[CheckMessage]:
    if database.get("ENGINE") != "django.db.backends.sqlite3":
        return []
    if str(database.get("OPTIONS", {}).get("transaction_mode", "")).upper() == "IMMEDIATE":
        return []
    return [
        Warning(
            "The broker's SQLite database does not use IMMEDIATE transactions: concurrent "
            "claims and enqueues can fail with 'database is locked' (a 503).",
            hint='Set DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", '
            '"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"}, or use PostgreSQL.',
            id="broker.W004",
        )
    ]


def _reachable_from_others(bind: str) -> bool:
    """Whether a gunicorn bind ("127.0.0.1:8080", "[::]:8080", "0.0.0.0:80", "unix:/run/b.sock")
    listens beyond this machine's loopback."""
    if bind.startswith(("unix:", "fd://")):
        return False
    host = bind.rsplit(":", 1)[0] if ":" in bind else bind
    host = host.strip("[]")
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True  # a host name other than localhost: assume others reach it


def exposure(binds: list[str], *, debug: bool, tokens: bool) -> list[str]:
    """What the web server should say at start when it listens where others reach it: DEBUG on
    (broker.W005) or the API open (broker.W006). Nothing on loopback: that is development."""
    exposed = [b for b in binds if _reachable_from_others(b)]
    if not exposed:
        return []
    where = ", ".join(exposed)
    said = []
    if debug:
        said.append(
            f"DEBUG is on while listening on {where}: error pages show settings and code to "
            "anyone who reaches them, and without SECRET_KEY set the development key is public "
            "(broker.W005). Set DEBUG=False and SECRET_KEY, or listen on 127.0.0.1."
        )
    if not tokens:
        said.append(
            f"BROKER_API_TOKENS is empty while listening on {where}: anyone who reaches it can "
            "enqueue, claim, cancel and read tasks (broker.W006). Set BROKER_API_TOKENS, or "
            "listen on 127.0.0.1."
        )
    return said


def exposure_now(binds: list[str]) -> list[str]:
    """exposure() with this process's settings; nothing when Django's settings cannot be read."""
    try:
        return exposure(
            binds, debug=bool(settings.DEBUG), tokens=bool(broker_settings.BROKER_API_TOKENS)
        )
    except ImproperlyConfigured:
        return []


def warn_exposed(server: Any) -> None:
    """gunicorn's when_ready hook (queueproject/gunicorn_conf.py): exposure_now() of the addresses
    it listens on, whatever -b or BROKER_BIND said, as warnings in gunicorn's log."""
    for line in exposure_now(list(server.cfg.bind)):
        server.log.warning(line)

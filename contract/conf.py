"""The broker's settings: every `BROKER_*` setting's default, and the one reader of them.

`broker_settings.BROKER_MAX_BODY_BYTES` is the project's setting when its settings name it, else
the default here: a Django project that adds "broker" to INSTALLED_APPS needs none of them. The
bundled project (queueproject/settings.py) reads them from the environment (API.md, "Settings")
with these same defaults. Here, in contract/, because the broker, the workers and the job types
shared by both all read them, and neither house imports the other.

A value is read from django.conf.settings on first use and kept (reading it again costs what an
attribute does); a change made by override_settings or pytest-django's `settings` fixture
(Django's setting_changed signal) forgets the kept ones.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed

from contract import limits

DEFAULTS: dict[str, Any] = {
    # Bearer tokens that keep every right; empty: the API is open.
    "BROKER_API_TOKENS": [],
    # SQS access keys {key_id: secret} with every right (AWS Signature V4), while tokens are set.
    "BROKER_SQS_CREDENTIALS": {},
    "BROKER_SWEEP_INTERVAL_MS": 250,
    "BROKER_RETRY_BASE_MS": 1000,
    "BROKER_RETRY_MAX_MS": 30_000,
    # A sweeper back after losing the database holds leases that ran out meanwhile this long.
    "BROKER_OUTAGE_GRACE_MS": limits.OUTAGE_GRACE_MS,
    # Done and cancelled tasks older than this are deleted by the sweeper; 0: kept forever.
    "BROKER_RETENTION": timedelta(days=7),
    # Received events are kept this long, for waits made after them; 0: kept forever.
    "BROKER_EVENT_RETENTION": timedelta(days=7),
    "BROKER_HISTORY_MINUTES": 2880,
    "BROKER_HISTORY_HOURS": 2160,
    "BROKER_MAX_SCHEDULES": limits.DEFAULT_MAX_SCHEDULES,
    "BROKER_MAX_BODY_BYTES": limits.DEFAULT_MAX_BODY_BYTES,
    # SQLite has no notifications: how often a process looks for ready tasks for parked claims.
    "BROKER_SQLITE_POLL_MS": 50,
    # Claim requests noted in memory are written once a second by a thread (broker.claimers).
    "BROKER_CLAIM_LOG_THREAD": True,
    # LISTEN's own connection (behind PgBouncer in transaction mode); empty: the database's.
    "BROKER_LISTEN_DATABASE_URL": "",
    # How often a process tries to reconnect to a lost PostgreSQL (the pool, the listener).
    "BROKER_DB_RECONNECT_MS": 200,
    # libpq's options for a PostgreSQL server that vanishes (no FIN, no RST): given up after
    # 10 s unacknowledged, probed after 5 s of silence (queueproject/settings.py).
    "BROKER_DB_TCP_OPTIONS": {
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": 10_000,
    },
    # The JSON API's middleware in the bundled project's WSGI app (queueproject/wsgi.py); None:
    # MIDDLEWARE. Nothing else reads it.
    "BROKER_API_MIDDLEWARE": None,
    # Dotted paths (fnmatch patterns) of django.tasks functions runworker may run; empty: the
    # TASKS backends' OPTIONS["ALLOWED_TASKS"].
    "BROKER_TASKS_ALLOWED": [],
    # Modules whose @handler functions runworker runs (as its --handlers).
    "BROKER_WORKER_HANDLERS": [],
    # Networks (CIDR) http_fetch may reach although they are internal.
    "BROKER_FETCH_ALLOWED_NETWORKS": [],
}


class BrokerSettings:
    """`BROKER_*` settings as attributes: the project's value, else the default."""

    def __getattr__(self, name: str) -> Any:
        # Only for a name not kept yet (a kept one is an instance attribute).
        if name not in DEFAULTS:
            raise AttributeError(f"{name} is not a broker setting")
        value = getattr(django_settings, name, DEFAULTS[name])
        setattr(self, name, value)
        return value

    def reload(self) -> None:
        """Forget the kept values: the next read asks django.conf.settings again."""
        self.__dict__.clear()


broker_settings = BrokerSettings()


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting in DEFAULTS:
        broker_settings.reload()


setting_changed.connect(_forget, dispatch_uid="contract.conf.forget")

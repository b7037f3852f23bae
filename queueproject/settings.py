"""Settings: the only module that reads the environment (django-environ)."""

import ipaddress
import re
import warnings
from datetime import timedelta
from pathlib import Path

import environ

from contract import limits
from contract.conf import DEFAULTS

BASE_DIR = Path(__file__).resolve().parent.parent
# A checkout keeps its database and collected static files beside manage.py; an installed
# queue-broker (`pip install`, the `queue-broker` command) keeps them in the working directory,
# never inside site-packages.
DATA_DIR = BASE_DIR if (BASE_DIR / "manage.py").is_file() else Path.cwd()

env = environ.Env()


def _whole(name: str, default: int | None = None, least: int = 1) -> int:
    """An integer setting of at least `least` (default: the broker's, contract/conf.py); anything
    else stops the process at start, naming it (env.int's ValueError was a traceback, and -1 or a
    tick of 0 a sweeper spinning). 0 is allowed where it means something: no retry backoff, no
    history kept."""
    raw = env.str(name, default="").strip() or str(DEFAULTS[name] if default is None else default)
    if not re.fullmatch(r"[+-]?\d{1,18}", raw) or int(raw) < least:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{name}: a whole number of at least {least}; not {raw!r}")
    return int(raw)


# Off unless asked for (`make run` asks): an environment nobody set up is production, not dev.
DEBUG = env.bool("DEBUG", default=False)
# The public development key only ever with DEBUG on. With DEBUG off and no key, only what signs
# (the web server: sessions, CSRF) refuses to start (broker.checks.require_secret_key); workers,
# producers, migrate and createsuperuser sign nothing and run without one.
SECRET_KEY = env.str("SECRET_KEY", default="") or (
    "dev-only-insecure-key-do-not-use-in-production" if DEBUG else ""
)
# Never "*": a browser tricked by DNS rebinding would otherwise reach an open broker on localhost.
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])

# Production mode is DEBUG off plus BROKER_HTTPS=1: TLS in front (gunicorn's certfile/keyfile,
# or a proxy on a host in gunicorn's forwarded_allow_ips, which then sees https). Secure cookies,
# http -> https redirects and HSTS follow; `manage.py check --deploy` is then clean.
BROKER_HTTPS = env.bool("BROKER_HTTPS", default=False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = BROKER_HTTPS
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=BROKER_HTTPS)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # load balancers probe over plain HTTP
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31_536_000 if BROKER_HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
CSRF_FAILURE_VIEW = "broker.api.errors.csrf_failure"  # JSON, as every error
SILENCED_SYSTEM_CHECKS: list[str] = []
if SECURE_HSTS_SECONDS and not SECURE_HSTS_PRELOAD:
    # security.W021 (no HSTS preload): joining browsers' preload list is the domain owner's
    # call, made at hstspreload.org and slow to undo; SECURE_HSTS_PRELOAD=1 opts in.
    SILENCED_SYSTEM_CHECKS.append("security.W021")

INSTALLED_APPS = [
    "queueproject.apps.AdminConfig",  # admin, discovered where it is used (apps.py)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served from here, not a CDN
    "broker",
    "workers",
    "django_tasks",  # the django.tasks backport: its checks and TASKS setting handling
]

MIDDLEWARE = [
    "broker.api.requestlog.RequestLogMiddleware",
    # Before the API guards: their early 401/413 answers get the security headers too, and an
    # http:// request is redirected before anything reads it.
    "django.middleware.security.SecurityMiddleware",
    "broker.api.middleware.JsonErrorMiddleware",
    "broker.api.middleware.BodyLimitMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "broker.api.middleware.WholeBodyMiddleware",
    "broker.api.middleware.PageGuardMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# The JSON API's own, shorter stack (queueproject/wsgi.py sends API paths through it): static
# files, sessions, CSRF, logins and messages serve the admin and the dashboard, not bearer-token
# clients, and skipping them saves ~0.2 ms of CPU per request on the hot path (cProfile).
_HUMAN_ONLY_MIDDLEWARE = {
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "broker.api.middleware.WholeBodyMiddleware",  # the API's views check their bodies
    "broker.api.middleware.PageGuardMiddleware",  # the API's views check their values
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # Slash redirects and frame options are for pages; BodyLimitMiddleware checks the Host.
    "django.middleware.common.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
}
BROKER_API_MIDDLEWARE = [m for m in MIDDLEWARE if m not in _HUMAN_ONLY_MIDDLEWARE]

ROOT_URLCONF = "queueproject.urls"
# `/jobs` and `/jobs/` are both API paths: no redirect dance for POST clients.
APPEND_SLASH = False

# The bundled project's own pages (index.html): templates/ in a checkout, packaged as
# queueproject/templates in the wheel. The broker's pages are the app's own (APP_DIRS).
PROJECT_TEMPLATES = [
    d for d in (BASE_DIR / "templates", Path(__file__).parent / "templates") if d.is_dir()
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": PROJECT_TEMPLATES,
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "queueproject.wsgi.application"

# After losing PostgreSQL (a restart, a failover), each process tries to reconnect this often
# (the pool and the LISTEN connection): writes resume within this of the primary being back.
# psycopg_pool's own schedule (1, 2, 4, 8 ... s apart) left a failover 12 s longer.
BROKER_DB_RECONNECT_MS = _whole("BROKER_DB_RECONNECT_MS")
# A PostgreSQL server that vanishes (a power cut, a network partition: no FIN, no RST) held each
# connection to it until the kernel's retransmissions gave up, about 15 minutes, and with them
# every request on one, the pool's reconnects and the wake-up listener: a failover of that kind
# stopped the node's writes for as long. So, unless DATABASE_URL names them, a connection is given
# up after 10 s of what it sent going unacknowledged (connecting included), and one that only
# waits to read (the listener, a long query) probes its server after 5 s of silence. A live
# server's kernel acknowledges and answers probes however busy the server is.
BROKER_DB_TCP_OPTIONS = dict(DEFAULTS["BROKER_DB_TCP_OPTIONS"])
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'db.sqlite3'}")}
_db = DATABASES["default"]
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE takes the write lock at BEGIN, so two claimers can never both read the same
    # ready row and then race to update it; WAL lets readers go on while one writer commits.
    _db.setdefault("OPTIONS", {}).update(
        {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
elif _db["ENGINE"] == "django.db.backends.postgresql":
    _db["OPTIONS"] = {**BROKER_DB_TCP_OPTIONS, **_db.get("OPTIONS", {})}  # the URL's own win
    # A pool, not one persistent connection per thread: gunicorn runs hundreds of threads for
    # parked long-polls, and a parked request gives its connection back while it waits.
    _db["CONN_MAX_AGE"] = 0
    _db.setdefault("OPTIONS", {})["pool"] = {
        "min_size": _whole("BROKER_DB_POOL_MIN", 2, least=0),
        "max_size": _whole("BROKER_DB_POOL_MAX", 16),
        "timeout": env.float("BROKER_DB_POOL_TIMEOUT", default=8.0),
    }
    # Each pooled connection is checked (one empty round trip) before a request gets it: after
    # PostgreSQL restarts, the stale ones are dropped rather than failing one request each.
    _db["CONN_HEALTH_CHECKS"] = env.bool("BROKER_DB_HEALTH_CHECKS", default=True)
    # Server-side binding lets psycopg prepare the hot statements (claim, ack, enqueue) once per
    # pooled connection, so PostgreSQL plans them once instead of on every call. Turn it off
    # (BROKER_DB_PREPARE=False) behind PgBouncer in transaction mode, which cannot keep them.
    if env.bool("BROKER_DB_PREPARE", default=True):
        _db["OPTIONS"].update({"server_side_binding": True, "prepare_threshold": 2})

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve app static files straight from their folders: no collectstatic step for `make run`
# (so STATIC_ROOT may not exist, which WhiteNoise would otherwise warn about).
WHITENOISE_USE_FINDERS = True
warnings.filterwarnings("ignore", message="No directory at")

REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["broker.api.renderers.FastJSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [],
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "broker.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Queue broker API",
    "DESCRIPTION": "A job-queue broker: enqueue, long-poll claim, ack/nack under leases, DLQ.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "POSTPROCESSING_HOOKS": ["broker.api.schema.finish_schema"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# The broker's own settings (API.md, "Settings").
# "a, b" means tokens "a" and "b": spaces around commas are not part of a token.
BROKER_API_TOKENS = [t.strip() for t in env.list("BROKER_API_TOKENS", default=[]) if t.strip()]


def _sqs_credentials(entries: list[str]) -> dict[str, str]:
    """BROKER_SQS_CREDENTIALS "key_id:secret,..." → {key_id: secret}; a malformed entry stops
    the process at start."""
    found: dict[str, str] = {}
    for entry in (e.strip() for e in entries):
        key_id, _, secret = entry.partition(":")
        if not key_id or not secret:
            from django.core.exceptions import ImproperlyConfigured

            raise ImproperlyConfigured("BROKER_SQS_CREDENTIALS: key_id:secret,... (a key is empty)")
        found[key_id] = secret
    return found


# Access keys that may sign SQS requests (AWS Signature V4) while BROKER_API_TOKENS is set.
BROKER_SQS_CREDENTIALS = _sqs_credentials(env.list("BROKER_SQS_CREDENTIALS", default=[]))
BROKER_SWEEP_INTERVAL_MS = _whole("BROKER_SWEEP_INTERVAL_MS")
BROKER_RETRY_BASE_MS = _whole("BROKER_RETRY_BASE_MS", least=0)
BROKER_RETRY_MAX_MS = _whole("BROKER_RETRY_MAX_MS", least=0)
# A sweeper back after losing the database holds the leases that ran out since its last sweep
# this long before it reclaims them: their workers could not settle them meanwhile.
BROKER_OUTAGE_GRACE_MS = _whole("BROKER_OUTAGE_GRACE_MS", least=0)


def _duration(name: str, default: str) -> timedelta:
    """A duration from the environment: whole seconds ("604800") or a number and a unit of
    s, m, h or d ("90s", "15m", "12h", "7d")."""
    raw = env.str(name, default=default).strip().lower() or default
    match = re.fullmatch(r"(\d+)\s*([smhd]?)", raw)
    if not match:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f'{name}: seconds, or like "7d", "12h", "15m"; not {raw!r}')
    unit = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]
    return timedelta(seconds=int(match[1]) * unit)


# Done and cancelled tasks older than this are deleted by the sweeper; "0" keeps them forever.
# Dead tasks are never pruned.
BROKER_RETENTION = _duration("BROKER_RETENTION", default="7d")
# Received events are kept this long, so a wait made after its event still matches it.
BROKER_EVENT_RETENTION = _duration("BROKER_EVENT_RETENTION", default="7d")
# How long GET /stats/history keeps its points: one-minute ones (two days), hourly ones (90 days).
BROKER_HISTORY_MINUTES = _whole("BROKER_HISTORY_MINUTES", least=0)
BROKER_HISTORY_HOURS = _whole("BROKER_HISTORY_HOURS", least=0)
# How many schedules may exist: one more is a 400 (0: none may be made).
BROKER_MAX_SCHEDULES = _whole("BROKER_MAX_SCHEDULES", least=0)
BROKER_MAX_BODY_BYTES = _whole("BROKER_MAX_BODY_BYTES")
# Django's own body cap (request.body refuses more) must not cut in below ours, nor below /sqs's.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(BROKER_MAX_BODY_BYTES, limits.SQS_MAX_REQUEST_BYTES)
# SQLite has no notifications: each broker process looks for ready tasks this often while
# claims are parked (one query per tick, however many are parked).
BROKER_SQLITE_POLL_MS = _whole("BROKER_SQLITE_POLL_MS")
# Claim requests are noted in memory and written once a second by a thread (broker.claimers);
# in-process tests turn the thread off and write the notes themselves.
BROKER_CLAIM_LOG_THREAD = env.bool(
    "BROKER_CLAIM_LOG_THREAD", default=DEFAULTS["BROKER_CLAIM_LOG_THREAD"]
)
# LISTEN needs a session of its own: behind PgBouncer in transaction mode, point this at
# PostgreSQL directly (or a session-mode pool). Empty: the listener uses DATABASE_URL.
BROKER_LISTEN_DATABASE_URL = env.str("BROKER_LISTEN_DATABASE_URL", default="")
# django.tasks on this broker (broker/tasks_backend.py); QUEUES [] allows any queue name.
TASKS = {
    "default": {
        "BACKEND": "broker.tasks_backend.BrokerBackend",
        "QUEUES": [],
        "OPTIONS": {"ALLOWED_TASKS": ["broker.demo_tasks.*"]},
    }
}
# Dotted paths (fnmatch patterns, "myapp.tasks.*") of @task functions runworker may run.
# When set, it replaces the TASKS backends' OPTIONS["ALLOWED_TASKS"]; with neither, none.
BROKER_TASKS_ALLOWED = env.list("BROKER_TASKS_ALLOWED", default=[])
# Modules whose @handler functions runworker runs (as its --handlers): "mypkg.jobs,other.module".
BROKER_WORKER_HANDLERS = env.list("BROKER_WORKER_HANDLERS", default=[])


# Networks (CIDR) the http_fetch job type may reach although they are loopback, private,
# link-local or reserved (contract/netpolicy.py); empty refuses them all. Parsed here, so a typo
# stops the process at start instead of failing enqueues.
def _networks(name: str) -> list[str]:
    found = []
    for text in env.list(name, default=[]):
        if not text.strip():
            continue
        try:
            found.append(str(ipaddress.ip_network(text.strip(), strict=False)))
        except ValueError:
            from django.core.exceptions import ImproperlyConfigured

            raise ImproperlyConfigured(
                f"{name}: networks in CIDR form (10.0.0.0/8), comma-separated; not {text!r}"
            ) from None
    return found


BROKER_FETCH_ALLOWED_NETWORKS = _networks("BROKER_FETCH_ALLOWED_NETWORKS")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # The process id, as gunicorn's own lines carry it: which worker of a node said what.
    "formatters": {
        "plain": {"format": "%(asctime)s [%(process)d] %(levelname)s %(name)s %(message)s"}
    },
    "filters": {"reconnects": {"()": "broker.dbpool.QuietReconnects"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    # One line per failed reconnect, several a second while the database is away, is too many.
    # A Host not in ALLOWED_HOSTS is the client's error, answered 400: not a traceback at ERROR
    # that any outside client can write into the log.
    "loggers": {
        "psycopg.pool": {"filters": ["reconnects"]},
        "django.security.DisallowedHost": {"level": "CRITICAL"},
    },
    # WARNING by default: a line per request and per state change costs the hot path ~0.1 ms;
    # LOG_LEVEL=INFO turns them on (make run does).
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="WARNING")},
}

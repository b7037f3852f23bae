"""Settings: the only module that reads the environment (django-environ)."""
import warnings
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

DEBUG = env.bool("DEBUG", default=True)
# The development key only works with DEBUG on; production mode insists on a real one.
SECRET_KEY = env.str("SECRET_KEY", default="") or (
    "dev-only-insecure-key-do-not-use-in-production" if DEBUG else ""
)
if not SECRET_KEY:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("SECRET_KEY must be set in the environment when DEBUG is off.")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["*"] if DEBUG else ["localhost", "127.0.0.1"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "broker",
    "workers",
]

MIDDLEWARE = [
    "broker.api.middleware.JsonErrorMiddleware",
    "broker.api.middleware.BodyLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "queueproject.urls"
# `/jobs` and `/jobs/` are both API paths: no redirect dance for POST clients.
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
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
    # A pool, not one persistent connection per thread: gunicorn runs hundreds of threads for
    # parked long-polls, and a parked request gives its connection back while it waits.
    _db["CONN_MAX_AGE"] = 0
    _db.setdefault("OPTIONS", {})["pool"] = {
        "min_size": env.int("BROKER_DB_POOL_MIN", default=2),
        "max_size": env.int("BROKER_DB_POOL_MAX", default=16),
        "timeout": env.float("BROKER_DB_POOL_TIMEOUT", default=10.0),
    }

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
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve app static files straight from their folders: no collectstatic step for `make run`
# (so STATIC_ROOT may not exist, which WhiteNoise would otherwise warn about).
WHITENOISE_USE_FINDERS = True
warnings.filterwarnings("ignore", message="No directory at", module="whitenoise")

REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["broker.api.renderers.FastJSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [],
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "broker.api.errors.exception_handler",
}

# The broker's own settings (API.md, "Settings").
BROKER_API_TOKENS = env.list("BROKER_API_TOKENS", default=[])
BROKER_SWEEP_INTERVAL_MS = env.int("BROKER_SWEEP_INTERVAL_MS", default=250)
BROKER_RETRY_BASE_MS = env.int("BROKER_RETRY_BASE_MS", default=1000)
BROKER_RETRY_MAX_MS = env.int("BROKER_RETRY_MAX_MS", default=30000)
BROKER_MAX_BODY_BYTES = env.int("BROKER_MAX_BODY_BYTES", default=262144)
# Django's own form-body cap must not cut in below ours.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(BROKER_MAX_BODY_BYTES, 2621440)
# How often a parked claim re-checks the database anyway: a safety net under LISTEN/NOTIFY,
# and the wake-up mechanism itself on SQLite, which has no notifications.
BROKER_POLL_FALLBACK_MS = env.int(
    "BROKER_POLL_FALLBACK_MS", default=50 if _db["ENGINE"].endswith("sqlite3") else 2000
)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}

"""What differs in a project made by `django-admin startproject` from the bundled one, as
override_settings arguments: its middleware, its URLconf, DRF's own defaults (browsable API,
session and basic authentication) and requests in transactions."""

from typing import Any

STARTPROJECT_MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

HOST_PROJECT: dict[str, Any] = {
    "ROOT_URLCONF": "tests.hostproject.urls",
    "MIDDLEWARE": STARTPROJECT_MIDDLEWARE,
    "APPEND_SLASH": True,
    "CSRF_FAILURE_VIEW": "django.views.csrf.csrf_failure",
    # A project's own DRF defaults, which the broker's views must not follow.
    "REST_FRAMEWORK": {
        "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
        "EXCEPTION_HANDLER": "rest_framework.views.exception_handler",
    },
}

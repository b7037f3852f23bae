"""Production mode: DEBUG off + BROKER_HTTPS=1 + tokens passes `check --deploy`; secure cookies,
headers, HTTPS redirects; no web server without SECRET_KEY."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

from tests.conftest import QUICK_PASSWORD_HASHERS

ROOT = Path(__file__).resolve().parents[2]
STRONG_KEY = "kT9#vQ2$mL7@pX4!rZ8%wB1^nF6&hJ3*sD5(gY0)cV-eU+aI=oP_t"
PRODUCTION = {
    "DEBUG": "False",
    "BROKER_HTTPS": "1",
    "SECRET_KEY": STRONG_KEY,
    "ALLOWED_HOSTS": "broker.example.com",
    "BROKER_API_TOKENS": "a-token-for-workers",
}
HTTPS_SETTINGS = {
    "SECURE_SSL_REDIRECT": True,
    "SECURE_HSTS_SECONDS": 31_536_000,
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
    "SESSION_COOKIE_SECURE": True,
    "CSRF_COOKIE_SECURE": True,
}


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "DEBUG",
            "SECRET_KEY",
            "BROKER_HTTPS",
            "ALLOWED_HOSTS",
            "SECURE_SSL_REDIRECT",
            "BROKER_API_TOKENS",
        }
    }
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy__production_mode__no_warnings() -> None:
    result = _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], **PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout, result.stdout + result.stderr


def test_check_deploy__plain_http_mode__warns_about_what_https_would_fix() -> None:
    env = {**PRODUCTION, "BROKER_HTTPS": "0"}
    result = _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], **env)
    assert result.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in result.stderr, result.stderr


def test_production_mode__settings_from_env__secure_cookies_hsts_redirect() -> None:
    code = (
        "import json; from django.conf import settings as s; print(json.dumps({k: getattr(s, k) "
        "for k in ['DEBUG', 'SECURE_SSL_REDIRECT', 'SECURE_HSTS_SECONDS', "
        "'SECURE_HSTS_INCLUDE_SUBDOMAINS', 'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', "
        "'SECURE_CONTENT_TYPE_NOSNIFF', 'X_FRAME_OPTIONS', 'SILENCED_SYSTEM_CHECKS']}))"
    )
    result = _run(["-c", code], DJANGO_SETTINGS_MODULE="queueproject.settings", **PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "DEBUG": False,
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31_536_000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_CONTENT_TYPE_NOSNIFF": True,
        "X_FRAME_OPTIONS": "DENY",
        "SILENCED_SYSTEM_CHECKS": ["security.W021"],
    }


def test_debug_off__no_secret_key__web_app_refuses_to_start() -> None:
    # What gunicorn and runserver import first.
    result = _run(
        ["-c", "import queueproject.wsgi"],
        DEBUG="False",
        SECRET_KEY="",
        DJANGO_SETTINGS_MODULE="queueproject.settings",
    )
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_check_deploy__no_secret_key__error_naming_it() -> None:
    result = _run(["manage.py", "check", "--deploy"], **{**PRODUCTION, "SECRET_KEY": ""})
    assert result.returncode != 0
    assert "broker.E001" in result.stderr and "SECRET_KEY must be set" in result.stderr


def test_check_deploy__no_api_tokens__warns_the_api_is_open() -> None:
    env = {**PRODUCTION, "BROKER_API_TOKENS": ""}
    result = _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], **env)
    assert result.returncode != 0
    assert "broker.W001" in result.stderr and "BROKER_API_TOKENS is empty" in result.stderr


def test_check__sqs_credentials_without_api_tokens__warns_they_are_ignored() -> None:
    env = {**PRODUCTION, "BROKER_API_TOKENS": "", "BROKER_SQS_CREDENTIALS": "AKID:secret"}
    result = _run(["manage.py", "check", "--fail-level", "WARNING"], **env)
    assert result.returncode != 0
    assert "broker.W002" in result.stderr and "credentials are ignored" in result.stderr
    quiet = _run(["manage.py", "check", "--fail-level", "WARNING"],
                 **{**env, "BROKER_API_TOKENS": "t"})  # fmt: skip
    assert quiet.returncode == 0, quiet.stderr


def test_web_app_start__sqs_credentials_without_api_tokens__logs_the_warning() -> None:
    env = {**PRODUCTION, "BROKER_API_TOKENS": "", "BROKER_SQS_CREDENTIALS": "AKID:secret"}
    result = _run(["-c", "import queueproject.wsgi"], **env)
    assert result.returncode == 0, result.stderr
    assert "broker.W002" in result.stderr


def test_web_app_start__urlconf_and_views_loaded_before_the_first_request() -> None:
    # Else each process's first request (a health check after a restart) imports them: 0.2 s.
    loaded = "import sys, queueproject.wsgi; print(sorted(set(sys.argv[1:]) & set(sys.modules)))"
    modules = ["queueproject.urls", "broker.api.views", "broker.sqs.protocol",
               "broker.dashboard.views"]  # fmt: skip
    result = _run(["-c", loaded, *modules], **PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == str(sorted(modules))


@pytest.mark.django_db
@override_settings(**HTTPS_SETTINGS)
def test_https_mode__plain_http_api_call__redirected_to_https() -> None:
    response = Client().get("/stats?x=1")
    assert response.status_code == 301
    assert response["Location"] == "https://testserver/stats?x=1"


@pytest.mark.django_db
@override_settings(**HTTPS_SETTINGS)
def test_https_mode__healthz_over_plain_http__answered_for_load_balancers() -> None:
    assert Client().get("/healthz").status_code == 200


@pytest.mark.django_db
@override_settings(**HTTPS_SETTINGS, BROKER_API_TOKENS=["t"])
def test_https_mode__even_a_401__carries_hsts_and_nosniff() -> None:
    response = Client().get("/stats", secure=True)
    assert response.status_code == 401
    assert response["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    assert response["X-Content-Type-Options"] == "nosniff"


@pytest.mark.django_db
@override_settings(**HTTPS_SETTINGS, PASSWORD_HASHERS=QUICK_PASSWORD_HASHERS)
def test_https_mode__admin_login__session_and_csrf_cookies_secure() -> None:
    User.objects.create_user("staff", password="a-long-password-3", is_staff=True)
    client = Client()
    login_page = client.get("/admin/login/", secure=True)
    assert login_page.cookies["csrftoken"]["secure"] is True
    response = client.post(
        "/admin/login/", {"username": "staff", "password": "a-long-password-3"}, secure=True
    )
    assert response.status_code == 302
    assert response.cookies["sessionid"]["secure"] is True
    assert response.cookies["sessionid"]["httponly"] is True

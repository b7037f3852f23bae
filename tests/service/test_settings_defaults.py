"""Every BROKER_* setting has its default inside the app (contract/conf.py): a project whose
settings name none of them runs the broker (API.md, "Your Django project"); a change made by
override_settings is seen at once; the system checks refuse shapes the broker cannot use."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import SystemCheckError

import broker
from broker import checks
from broker.models import Task
from contract.conf import DEFAULTS, broker_settings
from tests.procs import python


@pytest.fixture
def no_broker_settings(settings):
    """The project's settings without any BROKER_* name, as in a project of yours."""
    for name in DEFAULTS:
        if hasattr(django_settings, name):
            delattr(settings, name)
    # Deleting a setting sends no setting_changed signal (Django's nor pytest-django's).
    broker_settings.reload()
    yield settings
    broker_settings.reload()  # before the settings fixture puts them back, nothing read since


def test_every_default__read_when_the_project_names_none(no_broker_settings) -> None:
    for name, default in DEFAULTS.items():
        assert not hasattr(django_settings, name)
        assert getattr(broker_settings, name) == default, name


@pytest.mark.django_db
def test_enqueue__in_a_project_without_broker_settings(no_broker_settings) -> None:
    # It raised AttributeError: 'Settings' object has no attribute 'BROKER_MAX_BODY_BYTES'.
    task_id = broker.enqueue({"n": 1}, queue="mail")
    assert Task.objects.get(pk=task_id).queue == "mail"


def test_override__seen_at_once_and_undone(settings) -> None:
    assert broker_settings.BROKER_MAX_BODY_BYTES == django_settings.BROKER_MAX_BODY_BYTES
    settings.BROKER_MAX_BODY_BYTES = 1234
    assert broker_settings.BROKER_MAX_BODY_BYTES == 1234
    settings.BROKER_MAX_BODY_BYTES = 99
    assert broker_settings.BROKER_MAX_BODY_BYTES == 99


def test_unknown_name__attribute_error() -> None:
    with pytest.raises(AttributeError):
        _ = broker_settings.BROKER_NO_SUCH_THING


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("BROKER_API_TOKENS", "secret"),  # read one character at a time: "s" would be a token
        ("BROKER_API_TOKENS", ["ok", 3]),
        ("BROKER_MAX_BODY_BYTES", "262144"),
        ("BROKER_MAX_BODY_BYTES", 0),
        ("BROKER_RETRY_BASE_MS", -1),
        ("BROKER_RETRY_MAX_MS", True),
        ("BROKER_RETENTION", "7d"),
        ("BROKER_SQS_CREDENTIALS", ["AK:SK"]),
        ("BROKER_WORKER_HANDLERS", "myapp.jobs"),
    ],
)
def test_check__a_setting_the_broker_cannot_use__error(settings, name: str, value) -> None:
    setattr(settings, name, value)
    found = checks.settings_valid()
    assert [m.id for m in found] == ["broker.E002"]
    assert name in found[0].msg
    with pytest.raises(SystemCheckError, match=r"broker\.E002"):
        call_command("check")


def test_check__use_tz_off__error(settings) -> None:
    settings.USE_TZ = False
    assert [m.id for m in checks.settings_valid()] == ["broker.E003"]


def test_check__the_bundled_settings_and_good_values_pass(settings) -> None:
    assert checks.settings_valid() == []
    settings.BROKER_API_TOKENS = ("a", "b")
    settings.BROKER_RETENTION = timedelta(0)
    settings.BROKER_SQS_CREDENTIALS = {"AK": "SK"}
    assert checks.settings_valid() == []


def test_check__django_body_cap_below_the_brokers__warning(settings) -> None:
    assert checks.body_limits() == []
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440  # Django's default
    assert checks.body_limits() == []
    settings.BROKER_MAX_BODY_BYTES = 4_000_000
    assert [m.id for m in checks.body_limits()] == ["broker.W003"]


def test_check__sqlite_without_immediate_transactions__deploy_warning() -> None:
    sqlite = {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}
    assert [m.id for m in checks.sqlite_warnings(sqlite)] == ["broker.W004"]
    immediate = {**sqlite, "OPTIONS": {"transaction_mode": "IMMEDIATE"}}
    assert checks.sqlite_warnings(immediate) == []
    assert checks.sqlite_warnings({"ENGINE": "django.db.backends.postgresql"}) == []
    assert checks.sqlite_immediate() == []  # the bundled project's settings, either database


def test_docs__every_setting_listed_with_its_default() -> None:
    from tests.procs import ROOT

    page = (ROOT / "docs" / "django.md").read_text()
    for name in DEFAULTS:
        assert f"| `{name}`" in page or f"`{name}` |" in page or f"/ `{name}`" in page, name


@pytest.mark.parametrize(
    ("bind", "reachable"),
    [
        ("127.0.0.1:8080", False),
        ("127.0.0.2:8080", False),
        ("[::1]:8080", False),
        ("localhost:8080", False),
        ("unix:/run/broker.sock", False),
        ("0.0.0.0:8080", True),
        ("[::]:8080", True),
        ("10.1.2.3:80", True),
        ("broker.internal:8080", True),
    ],
)
def test_exposure__only_beyond_loopback(bind: str, reachable: bool) -> None:
    said = checks.exposure([bind], debug=True, tokens=False)
    assert [("W005" in s, "W006" in s) for s in said] == (
        [(True, False), (False, True)] if reachable else []
    )
    assert checks.exposure([bind], debug=False, tokens=True) == []


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def warning(self, line: str) -> None:
        self.lines.append(line)


class _Server:
    """What gunicorn's when_ready hook is given and warn_exposed uses of it."""

    def __init__(self, binds: list[str]) -> None:
        self.cfg = type("Cfg", (), {"bind": binds})()
        self.log = _Log()


def test_warn_exposed__with_the_binds_gunicorn_listens_on(settings) -> None:
    settings.DEBUG, settings.BROKER_API_TOKENS = False, []
    public, local = _Server(["0.0.0.0:8080"]), _Server(["127.0.0.1:8080"])
    checks.warn_exposed(public)
    checks.warn_exposed(local)
    assert len(public.log.lines) == 1 and "broker.W006" in public.log.lines[0]
    assert "0.0.0.0:8080" in public.log.lines[0]
    assert local.log.lines == []
    settings.BROKER_API_TOKENS = ["t"]
    quiet = _Server(["0.0.0.0:8080"])
    checks.warn_exposed(quiet)
    assert quiet.log.lines == []


def test_gunicorn_conf__when_ready_is_the_hook() -> None:
    # In a fresh interpreter: importing the configuration patches gunicorn's error pages.
    code = (
        "import django, os, runpy; os.environ['DJANGO_SETTINGS_MODULE'] = 'queueproject.settings';"
        " django.setup(); root = runpy.run_path('gunicorn.conf.py');"
        " from queueproject import gunicorn_conf;"
        " hook = gunicorn_conf.when_ready;"
        " print(hook.__module__, 'warn_exposed' in hook.__code__.co_names,"
        " root['when_ready'] is hook)"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    shown = python(code, env).stdout.split()
    assert shown == ["queueproject.gunicorn_conf", "True", "True"]

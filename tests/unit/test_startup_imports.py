"""What a process loads to start: admin where it is used, psycopg where a pool is configured.

Each is measured in a fresh interpreter: the test process has long since imported everything.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tests.procs import child_env, python

SETUP = (
    "import os, sys, json\n"
    "os.environ['DJANGO_SETTINGS_MODULE'] = 'queueproject.settings'\n"
    "import django\n"
    "django.setup()\n"
)


def _run(code: str, db_url: str = os.environ.get("DATABASE_URL", "")) -> Any:
    return json.loads(python(SETUP + code, env=child_env(db_url)).stdout)


def test_django_setup__no_admin_module_imported__until_the_urlconf_routes_admin() -> None:
    seen = _run(
        "from django.contrib import admin\n"
        "from broker.models import DeadTask, Task\n"
        "before = [m for m in ('broker.admin', 'broker.queue') if m in sys.modules]\n"
        "import queueproject.urls\n"
        "print(json.dumps({'before': before, 'after': [admin.site.is_registered(Task),"
        " admin.site.is_registered(DeadTask)]}))\n"
    )
    assert seen == {"before": [], "after": [True, True]}


def test_admin_check__discovers_the_admins_before_checking_them() -> None:
    # Break every ModelAdmin that keeps Django's list_display (auth's Group admin does), before
    # any of them is discovered: the admin check must then find them and report it.
    seen = _run(
        "from django.contrib import admin\n"
        "from django.core.checks import run_checks\n"
        "admin.ModelAdmin.list_display = ('no_such_field',)\n"
        "print(json.dumps(sorted({m.id for m in run_checks(tags=['admin'])})))\n"
    )
    assert seen == ["admin.E108"]


def test_django_setup__sqlite_database__psycopg_not_imported() -> None:
    # A worker host reaches the broker by HTTP: no PostgreSQL pool, no psycopg (0.2 s a start).
    seen = _run(
        "print(json.dumps('psycopg' in sys.modules))\n",
        "sqlite:////tmp/not-opened.sqlite3",
    )
    assert seen is False


def test_django_setup__postgres_pool__gated_connection_class_in_place() -> None:
    seen = _run(
        "from django.conf import settings\n"
        "pool = settings.DATABASES['default']['OPTIONS'].get('pool') or {}\n"
        "print(json.dumps(getattr(pool.get('connection_class'), '__name__', None)))\n",
        "postgres://postgres@127.0.0.1:5432/not_connected",
    )
    assert seen == "GatedConnection"

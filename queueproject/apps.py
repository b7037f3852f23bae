"""Django's admin app, its ModelAdmins imported by the processes that use them."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import SimpleAdminConfig
from django.contrib.admin.checks import check_admin_app, check_dependencies
from django.core import checks


class AdminConfig(SimpleAdminConfig):
    """django.contrib.admin, found by the URLconf and the admin system check, not at start-up.

    Django's own AdminConfig imports every app's admin module in django.setup(): for the broker's
    that is the state machine, the schedules' validation and their imports, 0.35 s of CPU in each
    process, a third of what `runworker`, `produce` and `submit` spent to start, though they
    serve no page. queueproject/urls.py discovers them before it routes /admin/ (the web app and the
    test client load it), and the admin check discovers them before it checks them.
    """

    def ready(self) -> None:
        checks.register(check_dependencies, checks.Tags.admin)
        checks.register(check_discovered_admin, checks.Tags.admin)


def check_discovered_admin(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    admin.autodiscover()
    return check_admin_app(app_configs, **kwargs)

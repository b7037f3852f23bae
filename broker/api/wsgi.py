"""Two Django handlers in one WSGI app: the JSON API on a short middleware stack, pages for people
(admin, dashboard, static files, API docs) on the full one."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler

from broker.api.middleware import is_api


class ApiHandler(WSGIHandler):
    """Django's WSGI handler built from settings.BROKER_API_MIDDLEWARE instead of MIDDLEWARE."""

    def load_middleware(self, is_async: bool = False) -> None:
        # Django reads settings.MIDDLEWARE here and nowhere else; swap it for the build only
        # (at start-up, before any request thread exists).
        full = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.BROKER_API_MIDDLEWARE
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = full


def dispatcher(api: WSGIHandler, human: WSGIHandler) -> Callable[..., Iterable[bytes]]:
    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        handler = api if is_api(environ.get("PATH_INFO", "")) else human
        return handler(environ, start_response)

    return application

"""One INFO line per request: method, path, status, duration. Never headers or the query string."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

log = logging.getLogger("broker.requests")


class RequestLogMiddleware:
    """Outermost, so the status is the one sent and the duration covers every other layer.

    The path only: query strings can carry lease ids and, from careless clients, secrets; the
    Authorization header is never read here.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not log.isEnabledFor(logging.INFO):
            return self.get_response(request)
        started = time.perf_counter()
        response = self.get_response(request)
        ms = (time.perf_counter() - started) * 1000
        log.info(
            "request method=%s path=%s status=%d duration_ms=%.1f",
            request.method,
            _quoted(request.path),
            response.status_code,
            ms,
            extra={
                "method": request.method,
                "path": request.path,
                "status": response.status_code,
                "duration_ms": round(ms, 1),
            },
        )
        return response


def _quoted(path: str) -> str:
    # Paths are client-chosen: keep one request one line, and key=value parseable.
    if path.isprintable() and " " not in path and '"' not in path:
        return path
    return '"' + path.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'

"""Two Django handlers in one WSGI app: the JSON API on a short middleware stack, pages for people
(admin, dashboard, static files, API docs) on the full one."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler

from broker.api.middleware import is_api
from broker.sqs.limits import is_sqs_path
from contract.conf import broker_settings
from contract.limits import SQS_MAX_REQUEST_BYTES


class ApiHandler(WSGIHandler):
    """Django's WSGI handler built from BROKER_API_MIDDLEWARE instead of MIDDLEWARE."""

    def load_middleware(self, is_async: bool = False) -> None:
        # Django reads settings.MIDDLEWARE here and nowhere else; swap it for the build only
        # (at start-up, before any request thread exists).
        full = settings.MIDDLEWARE
        api = broker_settings.BROKER_API_MIDDLEWARE
        settings.MIDDLEWARE = full if api is None else api
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = full


# Django reads a request's Content-Type parameters (with email.message's parser) before any view
# or middleware, in time quadratic in their number and in the semicolons inside quotes: 8 KB of
# them, the most gunicorn takes in a header, cost 40 ms of CPU. No real type comes near this
# length (a multipart boundary has at most 70 characters): a longer one keeps its media type.
MAX_CONTENT_TYPE = 256


def dispatcher(api: WSGIHandler, human: WSGIHandler) -> Callable[..., Iterable[bytes]]:
    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "")
        content_type = environ.get("CONTENT_TYPE", "")
        if len(content_type) > MAX_CONTENT_TYPE:
            environ["CONTENT_TYPE"] = content_type.split(";", 1)[0][:MAX_CONTENT_TYPE]
        coding = environ.get("HTTP_TRANSFER_ENCODING")
        if coding and "chunked" in coding.lower() and not environ.get("CONTENT_LENGTH"):
            buffer_chunked(environ, _body_limit(path))
        handler = api if is_api(path) else human
        return handler(environ, start_response)

    return application


def buffer_chunked(environ: dict[str, Any], limit: int) -> None:
    """A chunked body (no Content-Length) read into memory, up to one byte past `limit`, and
    given the Content-Length it has. Django reads a body by Content-Length alone: without one it
    saw an empty body, and an enqueue got 400, a claim ran on defaults and an ack lost its
    result. One byte over the limit is enough for the limit's own check to answer 413."""
    data = environ["wsgi.input"].read(limit + 1)
    environ["wsgi.input"] = io.BytesIO(data)
    environ["CONTENT_LENGTH"] = str(len(data))


def _body_limit(path: str) -> int:
    if is_sqs_path(path):
        return SQS_MAX_REQUEST_BYTES
    if is_api(path):
        return int(broker_settings.BROKER_MAX_BODY_BYTES)
    return int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)

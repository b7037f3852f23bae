"""Every error the API answers is JSON: {"error": "<sentence>", "fields": {...}}."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response

from broker.exceptions import BrokerError, InternalError, InvalidTaskError, NotFound
from contract.errors import flatten

__all__ = ["ValidationFailed", "error_body", "exception_handler", "flatten", "json_error"]

log = logging.getLogger(__name__)


class ValidationFailed(BrokerError):
    """The request has invalid fields."""

    status_code = 400

    def __init__(self, fields: dict[str, list[str]], message: str | None = None) -> None:
        super().__init__(message or _summary(fields))
        self.fields = fields


def _summary(fields: dict[str, list[str]]) -> str:
    name, messages = next(iter(fields.items()))
    more = f" (and {len(fields) - 1} more field(s))" if len(fields) > 1 else ""
    return f"Invalid {name}: {messages[0]}{more}"


def error_body(message: str, fields: dict[str, list[str]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"error": message}
    if fields:
        body["fields"] = fields
    return body


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """REST_FRAMEWORK["EXCEPTION_HANDLER"]: the broker's errors and DRF's, as JSON. Anything else
    (a DatabaseError, a bug) goes on to JsonErrorMiddleware, which answers it for every view."""
    headers: dict[str, str] = {}
    if isinstance(exc, ValidationFailed):
        return Response(error_body(exc.message, exc.fields), status=400)
    if isinstance(exc, InvalidTaskError):
        return Response(error_body(_summary(exc.fields), exc.fields), status=exc.status_code)
    if isinstance(exc, BrokerError):
        return Response(error_body(exc.message), status=exc.status_code)
    if isinstance(exc, Http404):
        return Response(error_body(NotFound().message), status=404)
    if isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.ValidationError):
        fields = flatten(exc.detail)
        return Response(error_body(_summary(fields), fields), status=400)
    if isinstance(exc, exceptions.APIException):
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(exc.wait)
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return Response(error_body(str(detail)), status=exc.status_code, headers=headers)
    return None


def error_response(exc: BrokerError) -> JsonResponse:
    """A broker error as a JSON answer outside DRF (middleware, Django's handlers)."""
    return json_error(exc.status_code, exc.message)


def json_error(status: int, message: str, **extra: Any) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


# Django's error views (a URLconf's handler400/403/404/500, CSRF_FAILURE_VIEW): JSON, as every
# error the broker gives. The bundled project's URLconf names them; broker.urls answers its own
# paths' 404s with `not_found` whatever a project's handlers are.
def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return error_response(NotFound())


def server_error(request: HttpRequest) -> JsonResponse:
    return error_response(InternalError())


def bad_request(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return json_error(400, "Bad request.")


def forbidden(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return json_error(403, "Forbidden.")


def csrf_failure(request: HttpRequest, reason: str = "") -> JsonResponse:
    return json_error(403, f"CSRF verification failed: {reason}" if reason else "Forbidden.")

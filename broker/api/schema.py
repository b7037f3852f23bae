"""OpenAPI 3 for the API (drf-spectacular): /api/schema/, and the Swagger UI at /api/docs/.

Every operation is written out (`extend_schema(operation=...)`, attached through view
extensions, so the views stay plain); `finish_schema` adds what every operation shares: the
bearer security when BROKER_API_TOKENS is set, and the 401, 413, 414, 415, 431 and 503 answers.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpResponse
from django.urls import reverse
from drf_spectacular.extensions import OpenApiViewExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.settings import spectacular_settings
from drf_spectacular.utils import extend_schema, extend_schema_view
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import APIException, NotFound
from rest_framework.request import Request

from broker.api import schema_operate as operate
from broker.api.errors import json_error
from broker.api.schema_components import (
    BATCH_COMPONENTS,
    LEASE_COMPONENTS,
    TASK_COMPONENTS,
    Schema,
    ref,
)
from broker.api.schema_operations import (
    OPEN_OPERATIONS,
    OPERATIONS,
    TAG_ORDER,
    answer,
    error_answer,
)
from broker.events import schema as events
from broker.exceptions import DatabaseUnavailable
from broker.history import schema as history
from broker.tokens import auth
from broker.types import schema as types
from broker.workflows import schema as workflows

# Each room of the API states its own operations and shapes (broker/workflows, ...).
OPERATIONS = {
    **OPERATIONS,
    **operate.OPERATIONS,
    **history.OPERATIONS,
    **workflows.OPERATIONS,
    **types.OPERATIONS,
    **events.OPERATIONS,
}
# Interleaved, not appended: the document's components keep the order they were published in.
COMPONENTS = {
    **TASK_COMPONENTS,
    **operate.COMPONENTS,
    **LEASE_COMPONENTS,
    **history.COMPONENTS,
    **BATCH_COMPONENTS,
    **workflows.COMPONENTS,
    **types.COMPONENTS,
    **events.COMPONENTS,
}


def _extension(target: str, operations: dict[str, Schema]) -> type[OpenApiViewExtension]:
    def view_replacement(self: OpenApiViewExtension) -> type:
        annotated = type(self.target.__name__, (self.target,), {"__module__": __name__})
        methods = {m: extend_schema(operation=op) for m, op in operations.items()}
        return extend_schema_view(**methods)(annotated)

    name = target.rsplit(".", 1)[-1] + "Schema"
    attrs = {"target_class": target, "view_replacement": view_replacement, "optional": True}
    return type(name, (OpenApiViewExtension,), attrs)


EXTENSIONS = [_extension(target, ops) for target, ops in OPERATIONS.items()]

_UNAUTHORIZED = answer(
    "Missing or wrong bearer token.",
    ref("Error"),
    **{"WWW-Authenticate": {"schema": {"type": "string"}, "description": 'Bearer realm="broker"'}},
)
_FORBIDDEN = error_answer(
    "The access token has no grant for this action on this queue (docs/tenants.md); a task or "
    "workflow in queues none of its grants names is a 404, as an unknown id."
)
_TOO_LARGE = error_answer("The body is over BROKER_MAX_BODY_BYTES.")
_NOT_JSON = error_answer(
    "The body is not JSON: Content-Type must be application/json (any parameters) or "
    "application/<anything>+json, or absent. Forms, multipart and text/plain change nothing."
)
_UNAVAILABLE = error_answer(DatabaseUnavailable().message)
# Answered by gunicorn itself, before the broker sees the request (still JSON).
_URI_TOO_LONG = error_answer(
    "The request line is over gunicorn's limit (limit_request_line, 4094)."
)
_HEADERS_TOO_LARGE = error_answer("Too many or too large headers (gunicorn's limits).")


def finish_schema(result: Schema, generator: Any, request: Any, public: bool) -> Schema:
    """POSTPROCESSING_HOOKS: components, security and the answers every operation shares."""
    tokens = auth.closed()
    result["tags"] = [{"name": tag} for tag in TAG_ORDER]
    components = result.setdefault("components", {})
    components.setdefault("schemas", {}).update(COMPONENTS)
    components["securitySchemes"] = {
        "bearerAuth": {
            "type": "http",
            "scheme": "bearer",
            "description": "One of BROKER_API_TOKENS, or an access token (createtoken); "
            "required only while either exists.",
        }
    }
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            responses = operation["responses"]
            if operation.get("operationId") in OPEN_OPERATIONS or not tokens:
                operation["security"] = []
            else:
                operation["security"] = [{"bearerAuth": []}]
                responses.setdefault("401", _UNAUTHORIZED)
                responses.setdefault("403", _FORBIDDEN)
            if "requestBody" in operation:
                responses.setdefault("413", _TOO_LARGE)
                responses.setdefault("415", _NOT_JSON)
            responses.setdefault("503", _UNAVAILABLE)
            responses.setdefault("414", _URI_TOO_LONG)
            responses.setdefault("431", _HEADERS_TOO_LARGE)
    return result


class SchemaView(SpectacularAPIView):
    """GET /api/schema/: YAML, or JSON with `Accept: application/json` or `?format=json`."""


def _is_staff(request: Request) -> bool:
    user = request.user
    return bool(user is not None and user.is_active and user.is_staff)


def _script_json(value: Any) -> str:
    # Inline <script> safe: no "</script>" or "<!--" can come out of the data.
    text = json.dumps(value)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class DocsView(SpectacularSwaggerView):
    """GET /api/docs/: Swagger UI from local static files, with the schema inlined.

    Inlined, so the page works when the schema itself needs a bearer token. Open while the API
    is open; once BROKER_API_TOKENS is set, like the admin, it needs a staff login.
    """

    authentication_classes = (SessionAuthentication,)
    url_name = "schema"
    # A page: OPTIONS would render DRF's metadata through the page's template (a 500).
    http_method_names = ["get", "head"]

    def handle_exception(self, exc: Exception) -> HttpResponse:
        # Its renderer is the page's template: an error (a POST's 405, a `?format=` it does not
        # render: DRF's Http404) would be an HTML page.
        if isinstance(exc, Http404):
            exc = NotFound()
        if isinstance(exc, APIException):
            return json_error(exc.status_code, str(exc.detail))
        return super().handle_exception(exc)

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
        if auth.closed() and not _is_staff(request):
            return redirect_to_login(request.get_full_path(), reverse("admin:login"))
        response = super().get(request, *args, **kwargs)
        spec = SchemaGenerator().get_schema(request=request, public=True)
        swagger = {**spectacular_settings.SWAGGER_UI_SETTINGS, "spec": spec}
        response.data["settings"] = _script_json(swagger)
        return response

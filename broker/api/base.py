"""The API's view base: DRF's APIView without the per-request work that has one answer."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.views import APIView

from broker.api.errors import exception_handler
from broker.api.parsing import require_json_type
from broker.api.renderers import FastJSONRenderer
from broker.tokens import access

_RENDERER = FastJSONRenderer()
_NEGOTIATOR = DefaultContentNegotiation()
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


class BrokerView(APIView):
    """Every answer is JSON, and bearer tokens are checked before any view (by middleware in the
    bundled project, by broker.urls' guard in yours): so no content negotiation, authenticators,
    permissions, throttles or versioning to run per request, and the headers every answer carries
    are computed once per view class (cProfile of the claim/ack path: these hooks cost ~0.1 ms a
    request). Nothing here reads a project's REST_FRAMEWORK setting."""

    parser_classes = ()
    authentication_classes = ()
    permission_classes = ()
    throttle_classes = ()
    _headers: dict[str, str] | None = None
    # method → the action class its route needs of an access token (broker.tokens.access):
    # "produce" etc., checked by the view on the queue or task it names; "read:*", the action
    # on every queue, checked here; "open" for none. A method left out refuses tokens.
    grants: dict[str, str] = {}

    def initialize_request(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Request:
        return Request(request, negotiator=_NEGOTIATOR, parser_context={"view": self})

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        self.format_kwarg = None
        request.accepted_renderer, request.accepted_media_type = _RENDERER, _RENDERER.media_type
        request.version, request.versioning_scheme = None, None
        method = request.method or ""
        if hasattr(self, method.lower()):
            declared = self.grants.get("get" if method == "HEAD" else method.lower())
            access.check_route(request, "open" if method == "OPTIONS" else declared)
        if method not in _SAFE and hasattr(self, method.lower()):
            # Also where no body is read (requeue, cancel): a plain HTML form must not requeue or
            # cancel a task by id any more than it may enqueue. A method the view lacks stays 405.
            require_json_type(request)

    def get_exception_handler(self) -> Any:
        # The broker's JSON errors whatever a project's REST_FRAMEWORK["EXCEPTION_HANDLER"] is.
        return exception_handler

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        return (_RENDERER, _RENDERER.media_type)

    @property
    def default_response_headers(self) -> dict[str, str]:
        cls = type(self)
        if cls._headers is None:
            cls._headers = {"Allow": ", ".join(self.allowed_methods)}
        return dict(cls._headers)

    def get_renderer_context(self) -> dict[str, Any]:
        return {"view": self}


def under(request: HttpRequest, item: object) -> str:
    """The path of `item` below the collection `request` posted to (a Location header): /jobs/7,
    or /queue/jobs/7 where a project includes the broker's URLs under /queue/."""
    return f"{request.path.rstrip('/')}/{item}"

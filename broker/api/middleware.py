"""Guards in front of every API view: body limit, bearer tokens, and JSON for every error."""

from __future__ import annotations

import logging
from collections.abc import Callable
from http import HTTPStatus

from django.conf import settings
from django.core.exceptions import SuspiciousOperation, TooManyFieldsSent
from django.db import DatabaseError, DataError
from django.http import HttpRequest, HttpResponse, QueryDict

from broker.api.errors import error_response, json_error
from broker.exceptions import DatabaseUnavailable, InternalError
from broker.sqs.limits import is_sqs_path
from broker.tokens import auth
from contract.conf import broker_settings
from contract.limits import whole_number

log = logging.getLogger(__name__)

# Pages for people (HTML, session login); everything else is the JSON API.
HUMAN_PREFIXES = ("/admin", "/dashboard", "/static/", "/api/docs")
# Open even with BROKER_API_TOKENS set: probes, the index of links (no data) at "/", the icon.
OPEN_PATHS = ("/healthz", "/", "/favicon.ico")

Handler = Callable[[HttpRequest], HttpResponse]


def is_api(path: str) -> bool:
    return not path.startswith(HUMAN_PREFIXES)


class JsonErrorMiddleware:
    """Outermost: no error is ever an HTML page, whatever failed and wherever.

    On the pages for people too (API.md: no request gets an HTML page; only a page itself is
    HTML): their 404 and 500 handlers answer JSON, but with DEBUG on (`make run`) Django answers
    with its technical pages instead, so `/dashboard/nope`, `/administrator` or
    `/static/nope.js` got an HTML 404, and a page's error an HTML traceback.
    """

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return json_answer(self.get_response(request))

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not is_api(request.path_info):
            return None
        return exception_answer(request, exc)


def json_answer(response: HttpResponse) -> HttpResponse:
    """`response`, or a JSON error of its status when it is an error that is not JSON."""
    if response.status_code >= 400:
        content_type = response.get("Content-Type", "")
        # SQS's errors are JSON too (application/x-amz-json-1.0), in SQS's own shape.
        if not content_type.startswith(("application/json", "application/x-amz-json")):
            reason = HTTPStatus(response.status_code).phrase
            new = json_error(response.status_code, f"{reason}.")
            for header in ("Allow", "WWW-Authenticate", "Retry-After"):
                if header in response:
                    new[header] = response[header]
            return new
    return response


def exception_answer(request: HttpRequest, exc: Exception) -> HttpResponse:
    """The JSON answer to an exception an API view raised (DRF's handler answers the rest)."""
    if isinstance(exc, TooManyFieldsSent):
        # Django's cap on query parameters, met when a view reads request.GET: the client's.
        most = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        return json_error(400, f"Too many parameters: at most {most}.")
    if isinstance(exc, SuspiciousOperation):
        return json_error(400, "Bad request.")
    if isinstance(exc, DatabaseError):
        log.warning("database error answered with 503: %s", exc)
        return error_response(DatabaseUnavailable())
    log.exception("unhandled error on %s %s", request.method, request.path_info)
    return error_response(InternalError())


class BodyLimitMiddleware:
    """400 for a Host not in ALLOWED_HOSTS, 413 before reading a body over
    BROKER_MAX_BODY_BYTES, 401 without a valid bearer token.

    Not the last two on /sqs: the SQS endpoint has its own body limit and its own signatures
    (broker/sqs).
    """

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info
        if is_api(path):
            # Django checks the Host header only when something asks for it; the API's short
            # stack has no CommonMiddleware to ask (a DNS-rebinding page must get a 400).
            request.get_host()
            if not is_sqs_path(path):
                refused = api_refusal(request, path in OPEN_PATHS)
                if refused is not None:
                    return refused
        return self.get_response(request)


def api_refusal(request: HttpRequest, open_path: bool) -> HttpResponse | None:
    """413 for a body over BROKER_MAX_BODY_BYTES, 401 without a valid bearer token while the API
    is closed (an env token or a database token exists: broker.tokens.auth; not on an open
    path); None when the request may go on, its grants as `request.broker_access`."""
    length = whole_number(request.META.get("CONTENT_LENGTH") or "0")
    limit = broker_settings.BROKER_MAX_BODY_BYTES
    if length is not None and length > limit:
        return json_error(413, f"The request body is over the {limit}-byte limit.")
    if open_path:
        return None
    try:
        access = auth.authenticate(request.META.get("HTTP_AUTHORIZATION", ""))
    except DatabaseError as exc:
        # A process that never read the tokens yet, asking while the database is away (a
        # failover): a 503 to retry, as any request the database cannot answer, not a 500.
        log.warning("token check answered with 503: %s", exc)
        return error_response(DatabaseUnavailable())
    if access is None:
        response = json_error(401, "Missing or wrong bearer token.")
        response["WWW-Authenticate"] = 'Bearer realm="broker"'
        return response
    request.broker_access = access  # the grants every view asks (broker.tokens.access)
    return None


class WholeBodyMiddleware:
    """400 for a page's request (admin, dashboard) whose body ended before its Content-Length.

    Django parses a form from whatever arrived: an admin login cut short after its password
    (a client that stalled past GUNICORN_CLIENT_TIMEOUT, or hung up) logged the user in. The
    API's views check this themselves (broker.api.parsing.read_json, the SQS endpoint).
    """

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_api(request.path_info):  # in the pages' stack only in tests (Django's client)
            return self.get_response(request)
        length = whole_number(request.META.get("CONTENT_LENGTH") or "")
        if length and len(request.body) < length:
            return json_error(
                400, "The body ended before its Content-Length: the request was cut short."
            )
        return self.get_response(request)


class PageGuardMiddleware:
    """400 for a page's request (admin, the dashboard) carrying a value no page can use.

    Admin lists filter on whatever the query string names, its pages look objects up by the id
    in their path, and its actions by the ids posted: a NUL (PostgreSQL's text cannot hold one),
    a regular expression that does not compile, a number past a column's range, a year past
    Python's, a selection that is no id came back from the database, the lookup or the date
    drill-down as a 500, on Django's own pages as on ours. One guard for every page rather than
    a check in each. Refused before an admin view runs: a NUL in the query string or a form
    (on SQLite, which cuts text at a NUL, a search for one matched every task, and "requeue all
    matching" requeued the whole DLQ), and the lookups a list cannot take from a query string
    (below). Refused when raised while a page is served: a value Django or the database could
    not take (DataError, ValueError, OverflowError), logged with its traceback.
    """

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(ADMIN_PREFIX):
            refusal = _admin_refusal(request)
            if refusal:
                return json_error(400, refusal)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if is_api(request.path_info) or not isinstance(exc, _BAD_VALUE):
            return None
        log.warning("page %s answered 400: %r", request.path_info, exc, exc_info=exc)
        return json_error(400, "A value in the address or the form is out of range or malformed.")


ADMIN_PREFIX = "/admin/"
# What a value the request carried raises once it reaches a lookup or the database.
_BAD_VALUE = (DataError, ValueError, OverflowError)
# Lookups a list cannot take from a query string: a regular expression (run over every row;
# on SQLite by Python's backtracking engine), and a range, which Django's admin passes on as one
# string (`?name__range=a,b` compared three characters: a 500).
_REFUSED_LOOKUPS = ("__regex", "__iregex", "__range")


def _admin_refusal(request: HttpRequest) -> str | None:
    """Why an admin request is refused before its view runs; None when it may go on."""
    form = request.POST if request.method == "POST" else QueryDict()
    if any(
        "\x00" in text
        for fields in (request.GET, form)
        for name in fields
        for text in (name, *fields.getlist(name))
    ):
        return "NUL characters are not allowed in an address's query or a form."
    if any(name.endswith(_REFUSED_LOOKUPS) for name in request.GET):
        return "Lists do not filter by regular expression or range: use the search or a filter."
    return None

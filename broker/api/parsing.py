"""Request bodies and query strings → validated values; anything else is a 400 naming the field."""

from __future__ import annotations

import json
import math
import string
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.db.models import QuerySet
from django.http import HttpRequest

from broker import validation
from broker.api.errors import ValidationFailed
from contract.fields import StrictInteger as StrictIntegerField
from contract.fields import StrictSerializer
from contract.limits import (
    DEFAULT_LEASE_MS,
    DEFAULT_WAIT_MS,
    MAX_CHECKPOINT_BYTES,
    MAX_JSON_DEPTH,
    MAX_LEASE_MS,
    MAX_PROGRESS_MESSAGE,
    MAX_WAIT_MS,
    NO_QUEUES,
    QUEUE_MESSAGE,
    QUEUE_PATTERN,
    QUEUE_RE,
    whole_number,
)
from contract.limits import nests_at_most as _nests_at_most
from contract.limits import parse_task_id as task_id

if TYPE_CHECKING:
    from broker.queue import NewTask, Report

# Names the views and batch endpoints read from here; each is defined once, in contract/.
__all__ = [
    "DEFAULT_LEASE_MS",
    "DEFAULT_WAIT_MS",
    "MAX_JSON_DEPTH",
    "MAX_LEASE_MS",
    "MAX_WAIT_MS",
    "QUEUE_PATTERN",
    "StrictIntegerField",
    "StrictSerializer",
    "ValidationFailed",
    "task_id",
]
from broker.exceptions import BrokerError

MISSING: Any = object()


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text}")
    return value


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# application/json, or any application/<name>+json (RFC 6839); parameters such as charset aside.
_SUBTYPE_CHARS = frozenset(string.ascii_letters + string.digits + "!#$&^_.+-")


class NotJson(BrokerError):
    """Request bodies are JSON: send Content-Type: application/json."""

    status_code = 415


def require_json_type(request: HttpRequest) -> None:
    """415 unless the request's Content-Type is JSON or absent (absent is read as JSON).

    Forms, multipart and text/plain are what a web page can send cross-site without asking
    (CORS "simple requests"): refusing them keeps any page a person visits from enqueueing,
    claiming or settling through a plain HTML form. Refused even with an empty body: an empty
    form post to /jobs/claim would hand a task to a browser that drops it.
    """
    meta = getattr(request, "_request", request).META
    given = (meta.get("CONTENT_TYPE") or "").split(";", 1)[0].strip().lower()
    if given and not _is_json_type(given):
        raise NotJson(
            f"Request bodies must be JSON (Content-Type: application/json), not {given[:100]!r}."
        )


def _is_json_type(given: str) -> bool:
    kind, _, subtype = given.partition("/")
    name, suffix = subtype[:-5], subtype[-5:]
    return kind == "application" and (
        subtype == "json" or (suffix == "+json" and bool(name) and set(name) <= _SUBTYPE_CHARS)
    )


def read_json(request: HttpRequest, *, required: bool = True) -> Any:
    """The body as JSON. Its type was checked before the view ran (BrokerView.initial: 415)."""
    raw = request.body
    if len(raw) < (whole_number(request.META.get("CONTENT_LENGTH") or "") or 0):
        # The client hung up mid-body: what arrived may parse, but it is not what was sent.
        message = "The body ended before its Content-Length: the request was cut short."
        raise ValidationFailed({"body": [message]}, message)
    if not raw.strip():
        if required:
            message = "A JSON body is required."
            raise ValidationFailed({"body": [message]}, message)
        return MISSING
    try:
        value = json.loads(raw, parse_float=_finite_float, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise ValidationFailed(
            {"body": [f"Not valid JSON: {exc}"]}, "The body is not valid JSON."
        ) from exc
    # Nesting N deep takes N opening brackets: with fewer in the whole text (the usual body),
    # counting them in C spares walking the parsed value.
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and not _nests_at_most(
        value, MAX_JSON_DEPTH
    ):
        # Storing the value dumps it again, recursively: without this bound a body a little
        # shallower than json.loads' limit got through the parse and failed there, as a 500.
        message = f"The body nests arrays and objects more than {MAX_JSON_DEPTH} deep."
        raise ValidationFailed({"body": [message]}, message)
    return value


def read_object(request: HttpRequest, *, required: bool = True) -> dict[str, Any]:
    data = read_json(request, required=required)
    if data is MISSING:
        return {}
    if not isinstance(data, dict):
        raise ValidationFailed(
            {"body": ["Expected a JSON object."]}, "The body must be a JSON object."
        )
    return data


dump_json = validation.dump_json


def parse_enqueue(data: Any) -> NewTask:
    """A POST /jobs body → NewTask (broker.validation); InvalidTaskError (400) naming each field."""
    return validation.new_task(data)


# -- query strings ----------------------------------------------------------------------------


# A filter given empty (`?key=`) is refused, not read as "no filter": a client whose variable came
# out empty would otherwise list every task (or drain every queue) instead of hearing about it.
GIVEN_EMPTY = "Given empty: give a value, or leave the parameter out."


def query_text(params: Any, name: str) -> str | None:
    """A query parameter as given; None when left out, a 400 naming it when given empty."""
    raw = params.get(name)
    if raw == "":
        raise ValidationFailed({name: [GIVEN_EMPTY]})
    return raw


def query_int(
    params: Any, name: str, default: int, *, minimum: int = 0, cap: int | None = None
) -> int:
    """A non-negative integer query parameter; values above `cap` are capped, not refused.

    Absent means the default; given empty (`wait_ms=`) is a bad value like any non-integer, so a
    client whose variable came out empty hears about it instead of getting the default.
    """
    raw = params.get(name)
    if raw is None:
        return default
    value = whole_number(raw)
    if value is None:
        raise ValidationFailed({name: ["Must be a non-negative integer."]})
    if value < minimum:
        raise ValidationFailed({name: [f"Must be at least {minimum}."]})
    return min(value, cap) if cap is not None else value


def newest_first(
    request: HttpRequest, rows: QuerySet[Any], default: int, cap: int
) -> tuple[list[Any], str | None]:
    """One page of `rows`, newest first from after ?cursor= (the last id of the page before),
    at most ?limit=; and the next page's URL, None on the last page."""
    params = request.GET
    limit = query_int(params, "limit", default, minimum=1, cap=cap)
    rows = rows.order_by("-pk")
    cursor = query_text(params, "cursor")
    if cursor is not None:
        after = task_id(cursor)
        if after is None:
            raise ValidationFailed({"cursor": ["Not a cursor this API gave out."]})
        rows = rows.filter(pk__lt=after)
    page = list(rows[: limit + 1])
    if len(page) <= limit:
        return page, None
    page = page[:limit]
    return page, page_after(request, page[-1].pk)


def page_after(request: HttpRequest, last: int) -> str:
    """The URL of the page that goes on after the item `last`: this one's, with its cursor."""
    query = {k: v for k, v in request.GET.items() if k != "cursor"}
    query["cursor"] = str(last)
    return request.build_absolute_uri(f"{request.path}?{urlencode(query)}")


def queue_list(raw: str | None, name: str = "queue") -> list[str] | None:
    """`a,b` → ["a", "b"]; left out, every queue. Given empty (`queue=`) it is a 400, like any
    query parameter given empty: a worker whose list of queues came out empty must not drain
    every queue. So is an empty name in the list (`a,,b`)."""
    if raw is None:
        return None
    if not raw:
        raise ValidationFailed({name: [NO_QUEUES]})
    names = raw.split(",")
    bad = [q for q in names if not QUEUE_RE.fullmatch(q)]
    if bad:
        raise ValidationFailed({name: [f"Not a queue name: {bad[0]!r}."]})
    return names


def queue_name(raw: str, name: str = "queue") -> str:
    """One queue name from a query string; 400 unless it matches QUEUE_PATTERN."""
    if not QUEUE_RE.fullmatch(raw):
        raise ValidationFailed({name: [QUEUE_MESSAGE]})
    return raw


def lease_id_from(request: HttpRequest, body: dict[str, Any]) -> str:
    query_value = request.GET.get("lease_id")
    body_value = body.get("lease_id")
    if body_value is not None and not isinstance(body_value, str):
        raise ValidationFailed({"lease_id": ["Must be a string."]})
    if query_value and body_value and query_value != body_value:
        raise ValidationFailed({"lease_id": ["Given twice, with different values."]})
    value = query_value or body_value
    if not value:
        raise ValidationFailed({"lease_id": ["This field is required."]}, "lease_id is required.")
    if "\x00" in value:  # never one of ours, and PostgreSQL refuses to compare it: a 503
        raise ValidationFailed({"lease_id": ["Not a lease id this API gave out."]})
    return value


def no_body(request: HttpRequest) -> None:
    """A call that takes no body (a requeue, a DELETE): none, or `{}`. Anything else is a 400,
    as for any body: not JSON, not an object, or its fields unknown (a typo must not pass)."""
    only_fields(read_object(request, required=False), set())


def only_fields(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = [key for key in body if key not in allowed]
    if unknown:
        raise ValidationFailed({key: ["Unknown field."] for key in unknown})


# -- progress reports -------------------------------------------------------------------------

REPORT_FIELDS = ("fraction", "message", "checkpoint")


def parse_progress(body: dict[str, Any]) -> Report:
    """A POST /jobs/{id}/progress body (lease_id and lease_ms aside) → Report; 400 naming each
    bad field, or the body when it reports nothing."""
    from broker.queue import Report

    if not any(name in body for name in REPORT_FIELDS):
        nothing = "Report at least one of fraction, message, checkpoint."
        raise ValidationFailed({"body": [nothing]}, nothing)
    problems: dict[str, list[str]] = {}
    fraction = body.get("fraction")
    # bool is an int to Python, not a number to JSON.
    if fraction is not None and (
        isinstance(fraction, bool)
        or not isinstance(fraction, int | float)
        or not 0 <= fraction <= 1
    ):
        problems["fraction"] = ["Must be a number from 0 to 1, or null."]
    message = body.get("message")
    if message is not None and (
        not isinstance(message, str) or len(message) > MAX_PROGRESS_MESSAGE
    ):
        problems["message"] = [
            f"Must be a string of at most {MAX_PROGRESS_MESSAGE} characters, or null."
        ]
    checkpoint = body.get("checkpoint")
    text = json.dumps(checkpoint, ensure_ascii=False, separators=(",", ":"))
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_CHECKPOINT_BYTES:
        problems["checkpoint"] = [
            f"Is {size} bytes as JSON; at most {MAX_CHECKPOINT_BYTES} are kept."
        ]
    if problems:
        raise ValidationFailed(problems)
    fields: dict[str, Any] = {}
    if "fraction" in body:
        fields["fraction"] = None if fraction is None else float(fraction)
    if "message" in body:
        fields["message"] = message
    if "checkpoint" in body:
        fields["checkpoint"] = None if checkpoint is None else dump_json(checkpoint)
    return Report(**fields)

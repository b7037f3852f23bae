"""Request bodies and query strings → validated values; anything else is a 400 naming the field."""
from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest

from broker import validation
from broker.api.errors import ValidationFailed
from contract.fields import StrictInteger as StrictIntegerField
from contract.fields import StrictSerializer
from contract.limits import (
    DEFAULT_LEASE_MS,
    DEFAULT_WAIT_MS,
    MAX_JSON_DEPTH,
    MAX_LEASE_MS,
    MAX_WAIT_MS,
    QUEUE_MESSAGE,
    QUEUE_PATTERN,
    QUEUE_RE,
)
from contract.limits import nests_at_most as _nests_at_most
from contract.limits import parse_task_id as task_id

if TYPE_CHECKING:
    from broker.queue import NewTask

# Names the views and batch endpoints read from here; each is defined once, in contract/.
__all__ = [
    "DEFAULT_LEASE_MS", "DEFAULT_WAIT_MS", "MAX_JSON_DEPTH", "MAX_LEASE_MS", "MAX_WAIT_MS",
    "QUEUE_PATTERN", "StrictIntegerField", "StrictSerializer", "ValidationFailed", "task_id",
]

MISSING: Any = object()


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text}")
    return value


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")


def read_json(request: HttpRequest, *, required: bool = True) -> Any:
    """The body as JSON, whatever Content-Type says (curl -d sends a form type with JSON in it).

    A real form body (a test client's default, an HTML form) is read as its fields.
    """
    raw = request.body
    django_request = getattr(request, "_request", request)
    if django_request.content_type in FORM_TYPES and raw.lstrip()[:1] not in (b"{", b"["):
        fields = django_request.POST.dict()
        if fields:
            return fields
        raw = b""
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
    if not _nests_at_most(value, MAX_JSON_DEPTH):
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


def query_int(
    params: Any, name: str, default: int, *, minimum: int = 0, cap: int | None = None
) -> int:
    """A non-negative integer query parameter; values above `cap` are capped, not refused."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not raw.isascii():
        raise ValidationFailed({name: ["Must be a non-negative integer."]})
    value = int(raw)
    if value < minimum:
        raise ValidationFailed({name: [f"Must be at least {minimum}."]})
    return min(value, cap) if cap is not None else value


def queue_list(raw: str | list[str] | None, name: str = "queue") -> list[str] | None:
    """`a,b` (or a JSON list) → ["a", "b"]; empty means every queue."""
    if raw is None:
        return None
    names = raw if isinstance(raw, list) else [q for q in raw.split(",") if q.strip()]
    bad = [q for q in names if not isinstance(q, str) or not QUEUE_RE.fullmatch(q)]
    if bad:
        raise ValidationFailed({name: [f"Not a queue name: {bad[0]!r}."]})
    return [q.strip() for q in names] or None


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


def only_fields(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = [key for key in body if key not in allowed]
    if unknown:
        raise ValidationFailed({key: ["Unknown field."] for key in unknown})

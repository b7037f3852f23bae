"""Request bodies and query strings → validated values; anything else is a 400 naming the field."""
from __future__ import annotations

import json
import math
import re
from typing import Any

from django.http import HttpRequest
from rest_framework import serializers

from broker.api.errors import ValidationFailed
from broker.queue import NewTask
from broker.states import PRIORITY_BY_NAME

QUEUE_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
_QUEUE_RE = re.compile(QUEUE_PATTERN)  # use fullmatch: "$" also matches before a final "\n"
QUEUE_MESSAGE = "Must match [A-Za-z0-9_.-]{1,64}."
MAX_DELAY_MS = 7 * 24 * 3600 * 1000
MAX_WAIT_MS = 30_000
MAX_LEASE_MS = 300_000
DEFAULT_WAIT_MS = 20_000
DEFAULT_LEASE_MS = 30_000
MISSING: Any = object()
MAX_JSON_DEPTH = 256


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


def _nests_at_most(value: Any, limit: int) -> bool:
    """Whether `value` nests arrays and objects at most `limit` deep; iterative, no recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


def read_object(request: HttpRequest, *, required: bool = True) -> dict[str, Any]:
    data = read_json(request, required=required)
    if data is MISSING:
        return {}
    if not isinstance(data, dict):
        raise ValidationFailed(
            {"body": ["Expected a JSON object."]}, "The body must be a JSON object."
        )
    return data


def dump_json(value: Any) -> str:
    # ASCII escapes keep any string (U+0000, lone surrogates) storable in a text column.
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


# -- fields -----------------------------------------------------------------------------------


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: no strings, no floats, no booleans."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictCharField(serializers.CharField):
    """A JSON string: numbers are not silently turned into text."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class AnyJSONField(serializers.Field):
    """Any JSON value, null included, kept as JSON text."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def validate_empty_values(self, data: Any) -> tuple[bool, Any]:
        if data is serializers.empty:
            return super().validate_empty_values(data)
        return (True, dump_json(data)) if data is None else (False, data)

    def to_internal_value(self, data: Any) -> str:
        return dump_json(data)

    def to_representation(self, value: Any) -> Any:
        return value


class QueueNameField(StrictCharField):
    """A queue name matching QUEUE_PATTERN as sent: not trimmed, no trailing newline."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(trim_whitespace=False, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if not _QUEUE_RE.fullmatch(value):
            # Raised, not self.fail(): DRF would str.format() the message and trip on "{1,64}".
            raise serializers.ValidationError(QUEUE_MESSAGE)
        return value


class StrictSerializer(serializers.Serializer):
    """Unknown body fields are an error: a typo like `max_attempt` must not pass silently."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"body": ["Expected a JSON object."]})
        unknown = {key: ["Unknown field."] for key in data if key not in self.fields}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            # Name every offending field at once, unknown ones and invalid ones alike.
            raise serializers.ValidationError({**unknown, **exc.detail}) from exc
        if unknown:
            raise serializers.ValidationError(unknown)
        return value

    def create(self, validated_data: Any) -> Any:  # pragma: no cover -- parse only
        raise NotImplementedError

    def update(self, instance: Any, validated_data: Any) -> Any:  # pragma: no cover
        raise NotImplementedError


class EnqueueSerializer(StrictSerializer):
    payload = AnyJSONField(required=True)
    max_attempts = StrictIntegerField(min_value=1, max_value=100, default=3)
    delay_ms = StrictIntegerField(min_value=0, max_value=MAX_DELAY_MS, default=0)
    queue = QueueNameField(default="default")
    priority = serializers.ChoiceField(choices=list(PRIORITY_BY_NAME), default="normal")
    # Not trimmed: "sleep_job " is not a registered type name.
    type = StrictCharField(
        allow_null=True, required=False, default=None, max_length=64, trim_whitespace=False
    )
    # Not trimmed: "k " and "k" are different keys.
    idempotency_key = StrictCharField(
        allow_null=True, required=False, default=None, max_length=255, trim_whitespace=False
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        job_type = attrs.get("type")
        if job_type is not None:
            from workers.jobtypes import REGISTRY

            spec = REGISTRY.get(job_type)
            if spec is None:
                raise serializers.ValidationError({"type": [f"Unknown job type {job_type!r}."]})
            validate = getattr(spec, "validate", None)
            problems = validate(json.loads(attrs["payload"])) if validate else None
            if problems:
                raise serializers.ValidationError(
                    # "" names the payload as a whole (say, not an object).
                    {f"payload.{name}" if name else "payload": msgs
                     for name, msgs in problems.items()}
                )
        return attrs


def new_task(attrs: dict[str, Any]) -> NewTask:
    return NewTask(
        payload=attrs["payload"],
        max_attempts=attrs["max_attempts"],
        delay_ms=attrs["delay_ms"],
        queue=attrs["queue"],
        priority=PRIORITY_BY_NAME[attrs["priority"]],
        type=attrs["type"],
        idempotency_key=attrs["idempotency_key"],
    )


_ENQUEUE_FIELDS = frozenset(EnqueueSerializer._declared_fields)


def _plain_key(key: Any) -> bool:
    if not isinstance(key, str) or not 0 < len(key) <= 255 or "\x00" in key:
        return False
    try:
        key.encode("utf-8")  # lone surrogates do not encode: the serializer refuses them
    except UnicodeEncodeError:
        return False
    return True


def quick_new_task(data: Any) -> NewTask | None:
    """The common enqueue body (untyped, every field plainly valid) without the serializer.

    ~40 times cheaper than EnqueueSerializer per item (a 500-item batch spent most of its time
    there). It accepts only what the serializer accepts, with the same defaults; anything else
    (typed jobs, any doubt) answers None, and the serializer decides and words the errors.
    """
    if type(data) is not dict or "payload" not in data or not _ENQUEUE_FIELDS.issuperset(data):
        return None
    get = data.get
    max_attempts, delay_ms = get("max_attempts", 3), get("delay_ms", 0)
    queue_name, priority = get("queue", "default"), get("priority", "normal")
    key = get("idempotency_key")
    if (
        type(max_attempts) is not int
        or not 1 <= max_attempts <= 100
        or type(delay_ms) is not int
        or not 0 <= delay_ms <= MAX_DELAY_MS
        or type(queue_name) is not str
        or not _QUEUE_RE.fullmatch(queue_name)
        or type(priority) is not str
        or priority not in PRIORITY_BY_NAME
        or get("type") is not None
        or (key is not None and not _plain_key(key))
    ):
        return None
    return NewTask(
        payload=dump_json(data["payload"]),
        max_attempts=max_attempts,
        delay_ms=delay_ms,
        queue=queue_name,
        priority=PRIORITY_BY_NAME[priority],
        type=None,
        idempotency_key=key,
    )


def parse_enqueue(data: Any) -> NewTask:
    quick = quick_new_task(data)
    if quick is not None:
        return quick
    serializer = EnqueueSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    return new_task(serializer.validated_data)


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
    bad = [q for q in names if not isinstance(q, str) or not _QUEUE_RE.fullmatch(q)]
    if bad:
        raise ValidationFailed({name: [f"Not a queue name: {bad[0]!r}."]})
    return [q.strip() for q in names] or None


def is_queue_name(name: str) -> bool:
    return _QUEUE_RE.fullmatch(name) is not None


def queue_name(raw: str, name: str = "queue") -> str:
    """One queue name from a query string; 400 unless it matches QUEUE_PATTERN."""
    if not _QUEUE_RE.fullmatch(raw):
        raise ValidationFailed({name: [QUEUE_MESSAGE]})
    return raw


def task_id(raw: str) -> int | None:
    """A path id → the row's key, or None when it cannot be one of ours (→ 404)."""
    if raw.isdigit() and raw.isascii() and len(raw) < 19 and str(int(raw)) == raw:
        return int(raw)
    return None


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

"""The one enqueue validator: every way in turns a POST /jobs body into a NewTask here.

POST /jobs, /jobs/batch, broker.enqueue() and the django.tasks backend all call new_task() or
new_tasks(), and get InvalidTaskError(fields) for anything the API answers with a 400.

One set of rules (contract.limits) is read twice: by EnqueueSerializer's fields, which word
every error, and by quick_new_task, the ~40x cheaper path for plain bodies, which only ever
says "yes, and this is the task" or "ask the serializer" (a property test holds them together).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from rest_framework import serializers

from broker.enqueueoptions import (
    UniqueSerializer,
    WaitForSerializer,
    plain_key,
    quick_unique,
    unique_from_attrs,
    wait_from_attrs,
)
from broker.exceptions import InvalidTaskError
from broker.queue import NewTask
from broker.states import PRIORITY_BY_NAME
from broker.types.checks import TypeBook
from contract import limits
from contract.errors import flatten
from contract.fields import QueueName, StrictInteger, StrictSerializer, StrictString
from contract.jobtypes import SPECS


def dump_json(value: Any) -> str:
    """Compact JSON text; ASCII escapes keep any string (U+0000, lone surrogates) storable."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


def json_text(value: Any) -> str:
    """A Python value as JSON text, as a JSON body could carry it; NaN and sets are refused.

    Raises InvalidTaskError naming "payload".
    """
    try:
        return json.dumps(value, allow_nan=False, ensure_ascii=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidTaskError({"payload": [f"Not JSON: {exc}"]}) from exc


def delay_ms_until(when: datetime) -> int:
    """delay_ms for a task that must not become ready before `when` (rounded up; 0 if past)."""
    micros = (when - timezone.now()) // timedelta(microseconds=1)
    return max(0, -(-micros // 1000))


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


def _optional_exact(max_length: int) -> StrictString:
    """An optional string taken as sent, spaces included."""
    return StrictString(
        allow_null=True, required=False, default=None, max_length=max_length, trim_whitespace=False
    )


class TaskIdList(serializers.Field):
    """`after`: 1 to MAX_AFTER distinct task ids (strings, as the API gives them out) → ints.
    A bad or repeated item is named by its index (`after.2`)."""

    def to_internal_value(self, data: Any) -> tuple[int, ...]:
        if not isinstance(data, list) or not 1 <= len(data) <= limits.MAX_AFTER:
            raise serializers.ValidationError(
                f"Must be a list of 1 to {limits.MAX_AFTER} task ids."
            )
        problems: dict[int, list[str]] = {}
        seen: set[int] = set()
        ids: list[int] = []
        for index, raw in enumerate(data):
            pk = limits.parse_task_id(raw)
            if pk is None:
                problems[index] = ["Not a task id (a string this API gave out)."]
            elif pk in seen:
                problems[index] = ["Named twice."]
            else:
                seen.add(pk)
                ids.append(pk)
        if problems:
            raise serializers.ValidationError(problems)
        return tuple(ids)

    def to_representation(self, value: Any) -> Any:  # pragma: no cover -- parse only
        return [str(pk) for pk in value]


DEBOUNCE_WITH_DELAY = "Give debounce_ms or delay_ms, not both: a debounced task waits debounce_ms."


class EnqueueSerializer(StrictSerializer):
    """A POST /jobs body; the words of every enqueue error. context["types"]: the TypeBook of
    the call it checks bodies for (one per batch or workflow)."""

    payload = AnyJSONField(required=True)
    max_attempts = StrictInteger(
        min_value=limits.MIN_ATTEMPTS,
        max_value=limits.MAX_ATTEMPTS,
        default=limits.DEFAULT_MAX_ATTEMPTS,
    )
    delay_ms = StrictInteger(
        min_value=0, max_value=limits.MAX_DELAY_MS, default=limits.DEFAULT_DELAY_MS
    )
    queue = QueueName(default=limits.DEFAULT_QUEUE)
    priority = serializers.ChoiceField(
        choices=list(PRIORITY_BY_NAME), default=limits.DEFAULT_PRIORITY
    )
    # Not trimmed: "sleep_job " is not a registered type name, and "k " and "k" are two keys.
    type = _optional_exact(limits.MAX_TYPE_NAME)
    idempotency_key = _optional_exact(limits.MAX_IDEMPOTENCY_KEY)
    key = StrictString(
        allow_null=True,
        required=False,
        default=None,
        min_length=1,
        max_length=limits.MAX_KEY,
        trim_whitespace=False,
    )
    after = TaskIdList(required=False, allow_null=True, default=None)
    after_policy = serializers.ChoiceField(
        choices=list(limits.AFTER_POLICIES), default=limits.DEFAULT_AFTER_POLICY
    )
    unique = UniqueSerializer(required=False, allow_null=True, default=None)
    wait_for = WaitForSerializer(required=False, allow_null=True, default=None)

    def to_internal_value(self, data: Any) -> Any:
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as exc:
            # validate() below runs only once every field passed: the type and its payload
            # are checked here too, so that one answer names every offending field.
            errors = exc.detail
            if isinstance(data, dict) and isinstance(errors, dict) and "type" not in errors:
                payload = None if "payload" in errors else (lambda: data.get("payload"))
                errors.update(_type_problems(data.get("type"), payload, self._types()))
            raise

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        unique = attrs.get("unique")
        if unique is not None and unique["debounce_ms"] is not None and attrs["delay_ms"]:
            raise serializers.ValidationError({"unique.debounce_ms": [DEBOUNCE_WITH_DELAY]})
        if attrs.get("type") is not None:
            payload = lambda: json.loads(attrs["payload"])  # noqa: E731
            problems = _type_problems(attrs["type"], payload, self._types())
            if problems:
                raise serializers.ValidationError(problems)
        return attrs

    def _types(self) -> TypeBook:
        book: TypeBook | None = self.context.get("types")
        if book is None:
            book = self.context["types"] = TypeBook()
        return book


def _type_problems(
    job_type: Any, payload: Callable[[], Any] | None, types: TypeBook
) -> dict[str, list[str]]:
    """What a job type finds wrong: an unknown type, or the places of its payload (`payload()`;
    None: a payload that failed its own checks, not looked at by its type). A built-in type
    checks with its contract, one of your own with its JSON Schema, read from the database."""
    if not isinstance(job_type, str):
        return {}
    spec = SPECS.get(job_type)
    if spec is None:
        return types.problems(job_type, payload)
    validate = getattr(spec, "validate", None)
    if validate is None or payload is None:
        return {}
    # "" names the payload as a whole (say, not an object).
    return {
        f"payload.{name}" if name else "payload": msgs
        for name, msgs in (validate(payload()) or {}).items()
    }


def task_from_attrs(attrs: dict[str, Any]) -> NewTask:
    """EnqueueSerializer's validated data → the NewTask it describes."""
    return NewTask(
        payload=attrs["payload"],
        max_attempts=attrs["max_attempts"],
        delay_ms=attrs["delay_ms"],
        queue=attrs["queue"],
        priority=PRIORITY_BY_NAME[attrs["priority"]],
        type=attrs["type"],
        idempotency_key=attrs["idempotency_key"],
        after=attrs["after"] or (),
        after_policy=attrs["after_policy"],
        key=attrs["key"],
        unique=unique_from_attrs(attrs.get("unique")),
        wait_for=wait_from_attrs(attrs.get("wait_for")),
    )


_ENQUEUE_FIELDS = frozenset(EnqueueSerializer._declared_fields)


def quick_new_task(data: Any) -> NewTask | None:
    """The common enqueue body (untyped, every field plainly valid) without the serializer.

    ~40 times cheaper than EnqueueSerializer per item (a 500-item batch spent most of its time
    there). It accepts only what the serializer accepts, with the same limits and defaults;
    anything else (typed jobs, any doubt) answers None, and the serializer decides.
    """
    if type(data) is not dict or "payload" not in data or not _ENQUEUE_FIELDS.issuperset(data):
        return None
    get = data.get
    max_attempts = get("max_attempts", limits.DEFAULT_MAX_ATTEMPTS)
    delay_ms = get("delay_ms", limits.DEFAULT_DELAY_MS)
    queue_name = get("queue", limits.DEFAULT_QUEUE)
    priority = get("priority", limits.DEFAULT_PRIORITY)
    key = get("idempotency_key")
    task_key = get("key")
    if (
        type(max_attempts) is not int
        or not limits.MIN_ATTEMPTS <= max_attempts <= limits.MAX_ATTEMPTS
        or type(delay_ms) is not int
        or not 0 <= delay_ms <= limits.MAX_DELAY_MS
        or type(queue_name) is not str
        or not limits.QUEUE_RE.fullmatch(queue_name)
        or type(priority) is not str
        or priority not in PRIORITY_BY_NAME
        or get("type") is not None
        or get("after") is not None
        or get("wait_for") is not None
        or "after_policy" in data
        or (key is not None and not plain_key(key))
        or (task_key is not None and not plain_key(task_key, limits.MAX_KEY))
    ):
        return None
    unique = None
    if (asked := get("unique")) is not None:
        unique = quick_unique(asked)
        if unique is None or (unique.debounce_ms is not None and delay_ms):
            return None
    return NewTask(
        payload=dump_json(data["payload"]),
        max_attempts=max_attempts,
        delay_ms=delay_ms,
        queue=queue_name,
        priority=PRIORITY_BY_NAME[priority],
        type=None,
        idempotency_key=key,
        key=task_key,
        unique=unique,
    )


def _checked(
    body: Any, serializer: EnqueueSerializer | None = None, types: TypeBook | None = None
) -> tuple[NewTask | None, dict[str, Any]]:
    """(the task, {}) or (None, {field: [messages]}): the fast path first, then the serializer."""
    quick = quick_new_task(body)
    if quick is not None:
        return quick, {}
    if serializer is None:
        serializer = EnqueueSerializer(context={"types": types or TypeBook()})
    try:
        # run_validation, as a list serializer runs each item: a null body is "may not be null".
        attrs = serializer.run_validation(body)
    except serializers.ValidationError as exc:
        return None, flatten(exc.detail)
    return task_from_attrs(attrs), {}


def new_task(body: Any, types: TypeBook | None = None) -> NewTask:
    """A POST /jobs body (payload as parsed JSON) → NewTask. `types`: the TypeBook shared by
    the bodies of one call (a workflow's steps), so each job type is read once.

    Raises InvalidTaskError naming each bad field ("queue", "payload.url").
    """
    task, problems = _checked(body, types=types)
    if task is None:
        raise InvalidTaskError(problems)
    return task


def new_tasks(bodies: list[Any], prefix: str) -> list[NewTask]:
    """Many bodies, all or nothing: NewTasks in order.

    Raises InvalidTaskError naming each bad field of every bad body by index:
    "<prefix>.3.max_attempts".
    """
    tasks: list[NewTask] = []
    problems: dict[str, list[str]] = {}
    serializer: EnqueueSerializer | None = None  # made once, if any body needs it
    for index, body in enumerate(bodies):
        quick = quick_new_task(body)
        if quick is not None:
            tasks.append(quick)
            continue
        serializer = serializer or EnqueueSerializer(context={"types": TypeBook()})
        task, item_problems = _checked(body, serializer)
        if task is None:
            # "body" (or "") is the item as a whole, say not an object: named "jobs.3".
            problems.update(
                {f"{prefix}.{index}" if k in ("", "body") else f"{prefix}.{index}.{k}": v
                 for k, v in item_problems.items()}
            )  # fmt: skip
        else:
            tasks.append(task)
    if problems:
        raise InvalidTaskError(problems)
    return tasks

"""An enqueue's two nested objects, `unique` and `wait_for`: their serializers (which word every
error), what they become (broker.queue's Unique and WaitFor), and the quick check of a plainly
valid `unique` that the enqueue's fast path takes (broker.validation.quick_new_task)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime
from rest_framework import serializers

from broker.queue import Unique
from broker.queue.base import WaitFor
from contract import limits
from contract.fields import StrictInteger, StrictSerializer, StrictString


class UniqueSerializer(StrictSerializer):
    """`unique`: at most one task of the queue per key (API.md "Unique tasks, debounce and
    throttle"); broker.queue.Unique."""

    key = StrictString(min_length=1, max_length=limits.MAX_UNIQUE_KEY, trim_whitespace=False)
    until = serializers.ChoiceField(
        choices=list(limits.UNIQUE_UNTIL), default=limits.DEFAULT_UNIQUE_UNTIL
    )
    period_s = StrictInteger(
        min_value=1,
        max_value=limits.MAX_UNIQUE_PERIOD_S,
        required=False,
        default=None,
        allow_null=True,
    )
    on_conflict = serializers.ChoiceField(
        choices=list(limits.UNIQUE_ON_CONFLICT), default=limits.DEFAULT_UNIQUE_ON_CONFLICT
    )
    debounce_ms = StrictInteger(
        min_value=0, max_value=limits.MAX_DEBOUNCE_MS, required=False, default=None, allow_null=True
    )
    debounce_max_ms = StrictInteger(
        min_value=1,
        max_value=limits.MAX_DEBOUNCE_MAX_MS,
        required=False,
        default=None,
        allow_null=True,
    )

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError("Expected a JSON object.")
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        problems = unique_problems(attrs)
        if problems:
            raise serializers.ValidationError(problems)
        return attrs


def unique_problems(attrs: dict[str, Any]) -> dict[str, list[str]]:
    """The rules between `unique`'s fields (each field already valid on its own)."""
    problems: dict[str, list[str]] = {}
    if attrs.get("until") == "period":
        if attrs.get("period_s") is None:
            problems["period_s"] = ['Required with "until": "period".']
    elif attrs.get("period_s") is not None:
        problems["period_s"] = ['Only with "until": "period".']
    if attrs.get("debounce_max_ms") is not None and attrs.get("debounce_ms") is None:
        problems["debounce_max_ms"] = ["Needs debounce_ms."]
    return problems


def unique_from_attrs(attrs: dict[str, Any] | None) -> Unique | None:
    if attrs is None:
        return None
    return Unique(
        key=attrs["key"],
        until=attrs["until"],
        period_s=attrs["period_s"],
        on_conflict=attrs["on_conflict"],
        debounce_ms=attrs["debounce_ms"],
        debounce_max_ms=attrs["debounce_max_ms"],
    )


class Rfc3339(serializers.Field):
    """An RFC 3339 time with its offset (a JSON string) → an aware datetime."""

    def to_internal_value(self, data: Any) -> datetime:
        parsed = parse_datetime(data) if isinstance(data, str) and len(data) <= 64 else None
        if parsed is None or parsed.tzinfo is None:
            raise serializers.ValidationError(
                "Must be an RFC 3339 time with its offset (2026-12-06T18:00:00.000Z)."
            )
        return parsed

    def to_representation(self, value: Any) -> Any:  # pragma: no cover -- parse only
        return value


class WaitForSerializer(StrictSerializer):
    """`wait_for` (and POST /jobs/{id}/wait's body): blocked until an event (API.md "Waiting
    for events, and approvals"); broker.queue.WaitFor."""

    event = StrictString(min_length=1, max_length=limits.MAX_EVENT_NAME, trim_whitespace=False)
    key = StrictString(min_length=1, max_length=limits.MAX_EVENT_KEY, trim_whitespace=False)
    since = Rfc3339(required=False, allow_null=True, default=None)
    timeout_ms = StrictInteger(
        min_value=1,
        max_value=limits.MAX_WAIT_TIMEOUT_MS,
        required=False,
        allow_null=True,
        default=None,
    )
    on_timeout = serializers.ChoiceField(
        choices=list(limits.ON_TIMEOUT), default=limits.DEFAULT_ON_TIMEOUT
    )

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError("Expected a JSON object.")
        return super().to_internal_value(data)


def wait_from_attrs(attrs: dict[str, Any] | None) -> WaitFor | None:
    if attrs is None:
        return None
    return WaitFor(
        event=attrs["event"],
        key=attrs["key"],
        since=attrs["since"],
        timeout_ms=attrs["timeout_ms"],
        on_timeout=attrs["on_timeout"],
    )


def _plain_text(text: str) -> bool:
    """No U+0000 (PostgreSQL's text refuses it) and no lone surrogate (UTF-8 has none)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")  # lone surrogates do not encode: the serializer refuses them
    except UnicodeEncodeError:
        return False
    return True


def plain_key(key: Any, most: int = limits.MAX_IDEMPOTENCY_KEY) -> bool:
    return isinstance(key, str) and 0 < len(key) <= most and _plain_text(key)


_UNIQUE_FIELDS = frozenset(UniqueSerializer._declared_fields)


def _whole(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def quick_unique(data: Any) -> Unique | None:
    """A plainly valid `unique` object → Unique; None: ask the serializer (which words errors)."""
    if type(data) is not dict or not _UNIQUE_FIELDS.issuperset(data):
        return None
    get = data.get
    key = get("key")
    until = get("until", limits.DEFAULT_UNIQUE_UNTIL)
    period_s = get("period_s")
    on_conflict = get("on_conflict", limits.DEFAULT_UNIQUE_ON_CONFLICT)
    debounce_ms = get("debounce_ms")
    debounce_max_ms = get("debounce_max_ms")
    if (
        not isinstance(key, str)
        or not plain_key(key, limits.MAX_UNIQUE_KEY)
        or until not in limits.UNIQUE_UNTIL
        or on_conflict not in limits.UNIQUE_ON_CONFLICT
        or (period_s is None) != (until != "period")
        or (period_s is not None and not _whole(period_s, 1, limits.MAX_UNIQUE_PERIOD_S))
        or (debounce_ms is not None and not _whole(debounce_ms, 0, limits.MAX_DEBOUNCE_MS))
        or (debounce_max_ms is not None and debounce_ms is None)
        or (
            debounce_max_ms is not None
            and not _whole(debounce_max_ms, 1, limits.MAX_DEBOUNCE_MAX_MS)
        )
    ):
        return None
    return Unique(key, until, period_s, on_conflict, debounce_ms, debounce_max_ms)

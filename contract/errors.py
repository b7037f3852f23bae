"""DRF's nested error detail → one flat {"a.b.0": [messages]}: how both sides name bad fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# DRF's key for an error about the whole object (not one field), from validate().
NON_FIELD = "non_field_errors"


def flatten(detail: Any, whole: str = "body", prefix: str = "") -> dict[str, list[str]]:
    """{"jobs": [{}, {"max_attempts": [...]}]} → {"jobs.1.max_attempts": [...]}.

    An error about the object itself (DRF's non_field_errors, or a bare message) is named after
    that object; at the top, it gets the name `whole` ("body" for a request, "" for a payload).
    """
    if isinstance(detail, Mapping):
        flat: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = "" if key == NON_FIELD else str(key)
            flat.update(flatten(value, whole, _dotted(prefix, name)))
        return flat
    if isinstance(detail, list) and detail and all(isinstance(d, (Mapping, list)) for d in detail):
        flat = {}
        for index, item in enumerate(detail):
            flat.update(flatten(item, whole, _dotted(prefix, str(index))))
        return flat
    messages = detail if isinstance(detail, list) else [detail]
    return {prefix or whole: [str(m) for m in messages]}


def _dotted(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix and name else prefix or name

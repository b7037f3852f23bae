"""The JSON Schema (draft 2020-12) of a built-in job type's payload, made from its DRF
PayloadSchema (contract/jobtypes/): what GET /types shows for the built-ins.

The DRF schema stays the rule the broker and the workers apply; this is its description in the
language a type of your own is written in, close enough that a payload one accepts the other
accepts (tests/unit/test_typeschema.py holds them together on every built-in's sample and on bad
payloads). What a `validate_<field>` method checks is said by the schema's `json_schema_rules`
where JSON Schema can say it; what it cannot (two keys that clash once uppercased, a private
address) is left to the description.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rest_framework import serializers

from contract.fields import StrictSerializer
from contract.payloads import DIALECT


def payload_schema(schema: type[StrictSerializer]) -> dict[str, Any]:
    """The JSON Schema of payloads `schema` (a PayloadSchema) accepts: an object, unknown keys
    refused. Raises TypeError for a field it has no JSON Schema for."""
    fields = schema().fields
    rules: dict[str, dict[str, Any]] = getattr(schema, "json_schema_rules", {})
    properties = {name: {**field_schema(field), **rules.get(name, {})} for name, field in
                  fields.items()}  # fmt: skip
    result: dict[str, Any] = {"$schema": DIALECT, "type": "object", "properties": properties}
    required = [name for name, field in fields.items() if field.required]
    if required:
        result["required"] = required
    result["additionalProperties"] = False
    return result


def field_schema(field: serializers.Field) -> dict[str, Any]:
    """One field's JSON Schema: its own `json_schema` if it states one, else by its class."""
    own = getattr(field, "json_schema", None)
    if own is not None:
        found = dict(own)
    else:
        for kind, describe in _KINDS:
            if isinstance(field, kind):
                found = describe(field)
                break
        else:
            raise TypeError(f"no JSON Schema for {type(field).__name__} {field.field_name!r}")
    if field.allow_null and "type" in found:
        found["type"] = [found["type"], "null"]
    if not field.required and field.default is not serializers.empty:
        default = field.default() if callable(field.default) else field.default
        found["default"] = default
    return found


def _bounds(field: Any, low: str = "minimum", high: str = "maximum") -> dict[str, Any]:
    found = {}
    if getattr(field, "min_value", None) is not None:
        found[low] = field.min_value
    if getattr(field, "max_value", None) is not None:
        found[high] = field.max_value
    return found


def _integer(field: Any) -> dict[str, Any]:
    return {"type": "integer", **_bounds(field)}


def _number(field: Any) -> dict[str, Any]:
    return {"type": "number", **_bounds(field)}


def _string(field: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"type": "string"}
    if isinstance(field, serializers.EmailField):
        found["format"] = "email"
    least = field.min_length or (0 if field.allow_blank else 1)
    if least:
        found["minLength"] = least
    if field.max_length is not None:
        found["maxLength"] = field.max_length
    if not field.allow_blank and field.trim_whitespace:
        found["pattern"] = r"\S"  # blank once trimmed is refused too
    return found


def _choice(field: Any) -> dict[str, Any]:
    return {"enum": list(field.choices)}


_KINDS: tuple[tuple[type, Callable[[Any], dict[str, Any]]], ...] = (
    (serializers.BooleanField, lambda field: {"type": "boolean"}),
    (serializers.IntegerField, _integer),
    (serializers.FloatField, _number),
    (serializers.ChoiceField, _choice),
    (serializers.CharField, _string),
    (serializers.DictField, lambda field: {"type": "object"}),
    (serializers.ListField, lambda field: {"type": "array"}),
)

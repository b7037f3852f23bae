"""data_transform: uppercases the keys of the input object and trims its string values."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from contract.fields import PayloadSchema
from contract.jobtypes import JobSpec


class TransformPayload(PayloadSchema):
    input = serializers.DictField()

    def validate_input(self, value: dict[str, Any]) -> dict[str, Any]:
        seen: dict[str, str] = {}
        for key in value:
            other = seen.setdefault(key.upper(), key)
            if other != key:
                # Both would become one key: refuse rather than silently drop one value.
                raise serializers.ValidationError(
                    f"Keys {other!r} and {key!r} are the same once uppercased."
                )
        return value


SPEC = JobSpec(
    name="data_transform",
    schema=TransformPayload,
    description="Uppercases the keys of input (an object) and trims its string values.",
    sample=lambda broker_url: {"input": {"name": "  Ada Lovelace ", "born": 1815}},
)

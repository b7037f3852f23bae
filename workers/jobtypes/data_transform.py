"""data_transform: uppercases the keys of the input object and trims its string values."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from workers.jobtypes import JobType
from workers.jobtypes._fields import PayloadSchema


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


def transform(data: dict[str, Any]) -> dict[str, Any]:
    """Top-level keys uppercased, top-level string values stripped; other values as they are."""
    return {key.upper(): value.strip() if isinstance(value, str) else value
            for key, value in data.items()}


def run(payload: dict[str, Any]) -> dict[str, Any]:
    """The transformed input object is the result."""
    return transform(payload["input"])


JOB_TYPE = JobType(
    name="data_transform",
    schema=TransformPayload,
    run=run,
    description="Uppercases the keys of input (an object) and trims its string values.",
    sample=lambda broker_url: {"input": {"name": "  Ada Lovelace ", "born": 1815}},
)

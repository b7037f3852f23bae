"""Strict payload fields for job type schemas: JSON types as sent, no silent coercion."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class StrictInteger(serializers.IntegerField):
    """A JSON integer: not a string, a float or a boolean."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictNumber(serializers.FloatField):
    """A JSON number (integer or not): not a string or a boolean."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictString(serializers.CharField):
    """A JSON string: numbers are not turned into text."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class PayloadSchema(serializers.Serializer):
    """Base of the payload schemas: parse only, never saves anything."""

    def create(self, validated_data: Any) -> Any:  # pragma: no cover -- parse only
        raise NotImplementedError

    def update(self, instance: Any, validated_data: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

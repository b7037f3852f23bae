"""Strict DRF fields: JSON types as sent, no silent coercion, unknown keys refused."""

from __future__ import annotations

from typing import Any, ClassVar

from rest_framework import serializers

from contract.limits import QUEUE_MESSAGE, QUEUE_RE


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


class QueueName(StrictString):
    """A queue name matching QUEUE_RULE as sent: not trimmed, no trailing newline."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(trim_whitespace=False, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if not QUEUE_RE.fullmatch(value):
            # Raised, not self.fail(): DRF would str.format() the message and trip on "{1,64}".
            raise serializers.ValidationError(QUEUE_MESSAGE)
        return value


class StrictSerializer(serializers.Serializer):
    """Parse only; unknown keys are an error: a typo like `max_attempt` must not pass silently.

    A job type's schema says in `json_schema_rules` ({field: JSON Schema keywords}) what its
    `validate_<field>` methods check, where JSON Schema can say it (contract.typeschema).
    """

    json_schema_rules: ClassVar[dict[str, dict[str, Any]]] = {}

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


# The base of job types' payload schemas (contract/jobtypes/): a strict serializer.
PayloadSchema = StrictSerializer

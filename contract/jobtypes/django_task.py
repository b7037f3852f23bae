"""django_task: runs a django.tasks @task function by dotted path, if the worker allows it."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from contract.djtasks import JOB_TYPE
from contract.fields import PayloadSchema, StrictInteger, StrictString
from contract.jobtypes import JobSpec


class _AnyList(serializers.Field):
    json_schema = {"type": "array"}

    def to_internal_value(self, data: Any) -> list[Any]:
        if not isinstance(data, list):
            raise serializers.ValidationError("Must be a JSON array.")
        return data


class _AnyObject(serializers.Field):
    json_schema = {"type": "object"}

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError("Must be a JSON object.")
        return data


class DjangoTaskPayload(PayloadSchema):
    path = StrictString(max_length=500, trim_whitespace=False)
    args = _AnyList(default=list)
    kwargs = _AnyObject(default=dict)
    priority = StrictInteger(min_value=-100, max_value=100, default=0)
    run_after = StrictString(allow_null=True, default=None)
    # validate_path's rule: Python names (ASCII), two or more, joined by dots.
    json_schema_rules = {
        "path": {"pattern": r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$"}
    }

    def validate_path(self, value: str) -> str:
        parts = value.split(".")
        # Python names (ASCII), two or more: isidentifier() reads [A-Za-z_][A-Za-z0-9_]* here.
        if len(parts) < 2 or not all(p.isascii() and p.isidentifier() for p in parts):
            raise serializers.ValidationError("Must be a dotted path: module.function.")
        return value


SPEC = JobSpec(
    name=JOB_TYPE,
    schema=DjangoTaskPayload,
    description=(
        "Runs the django.tasks @task at path with args and kwargs, if the worker's allow-list "
        "(BROKER_TASKS_ALLOWED, or the TASKS backend's OPTIONS['ALLOWED_TASKS']) matches it."
    ),
    # Allowed by the project's TASKS OPTIONS (queueproject/settings.py): returns 5.
    sample=lambda broker_url: {"path": "broker.demo_tasks.add", "args": [2, 3], "kwargs": {}},
)

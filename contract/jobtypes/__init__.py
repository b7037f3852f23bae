"""Job types as both sides know them: name, payload schema, description, sample payload.

A module here (not starting with "_") defines `SPEC = JobSpec(...)`, found on first use of
SPECS. The broker validates a typed payload with its spec at enqueue; the worker validates it
again, filling in defaults, before the handler registered against the same name
(workers/jobtypes/<name>.py) runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from contract.errors import flatten
from contract.registry import Registry

# The key of a problem with the payload as a whole (not an object, a cross-field rule); the
# broker reports it as the field "payload" itself.
WHOLE_PAYLOAD = ""


class InvalidPayloadError(ValueError):
    """A payload the type's schema refuses; the message names each offending field."""

    def __init__(self, name: str, problems: Mapping[str, list[str]]) -> None:
        """problems maps field name (WHOLE_PAYLOAD for the payload itself) to messages."""
        detail = "; ".join(
            f"{field or 'payload'}: {' '.join(msgs)}" for field, msgs in problems.items()
        )
        super().__init__(f"invalid {name} payload: {detail}")
        self.problems = dict(problems)


def _no_sample(broker_url: str) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class JobSpec:
    """A job type's contract: `schema` (a contract.fields.PayloadSchema) validates the payload.

    sample(broker_url) is the payload `manage.py submit` sends.
    """

    name: str
    schema: type[Any]
    description: str = ""
    sample: Callable[[str], dict[str, Any]] = _no_sample

    def __post_init__(self) -> None:
        from contract.fields import StrictSerializer

        if not (isinstance(self.schema, type) and issubclass(self.schema, StrictSerializer)):
            # Unknown payload keys must be refused as unknown body fields are.
            raise TypeError(f"{self.name}: schema must be a contract.fields.PayloadSchema")

    def parse(self, payload: Any) -> tuple[dict[str, Any] | None, dict[str, list[str]]]:
        """(validated payload with defaults, {}) or (None, {field: [messages]})."""
        if not isinstance(payload, dict):
            return None, {WHOLE_PAYLOAD: [f"The {self.name} payload must be a JSON object."]}
        serializer = self.schema(data=payload)
        if not serializer.is_valid():
            return None, flatten(serializer.errors, whole=WHOLE_PAYLOAD)
        return dict(serializer.validated_data), {}

    def validate(self, payload: Any) -> dict[str, list[str]] | None:
        """The broker's check at enqueue: {field: [messages]}, or None when the payload is fine."""
        return self.parse(payload)[1] or None

    def json_schema(self) -> dict[str, Any]:
        """The payload's JSON Schema (draft 2020-12), made from `schema` (contract.typeschema)."""
        from contract.typeschema import payload_schema

        return payload_schema(self.schema)

    def check(self, payload: Any) -> dict[str, Any]:
        """The validated payload with defaults; raises InvalidPayloadError on a bad one."""
        data, problems = self.parse(payload)
        if data is None:
            raise InvalidPayloadError(self.name, problems)
        return data


class SpecRegistry(Registry[JobSpec]):
    """name → JobSpec, from the modules of a package declaring SPEC."""

    attr = "SPEC"
    kind = JobSpec


SPECS: SpecRegistry = SpecRegistry(__name__, __path__)

"""The JSON Schema made from each built-in type's DRF schema (contract.typeschema) agrees with it:
what one accepts the other accepts, on the samples and on bad payloads of every field."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework import serializers

from contract.fields import PayloadSchema, StrictInteger
from contract.jobtypes import SPECS
from contract.payloads import PayloadCheck, schema_problems
from contract.typeschema import field_schema, payload_schema
from tests.conftest import SAMPLE_TYPES

BUILTINS = sorted(SPECS)
WRONG_TYPE = {
    "integer": ["1", 1.5, True, None, [], {}],
    "number": ["1", True, None, [], {}],
    "string": [1, True, None, [], {}],
    "object": [[], "x", 1, None],
    "array": [{}, "x", 1, None],
}


def agree(name: str, payload: Any) -> tuple[bool, bool]:
    """(DRF accepts, the generated JSON Schema accepts)."""
    spec = SPECS[name]
    return spec.validate(payload) is None, not PayloadCheck(spec.json_schema()).problems(payload)


def bad_payloads(name: str) -> list[Any]:
    """Payloads refused for one reason each: not an object, an unknown key, a missing required
    field, each field given a value of the wrong JSON type or past its bounds."""
    spec = SPECS[name]
    sample = spec.sample("http://broker.test:8080")
    found: list[Any] = [[], "x", None, 1, {**sample, "no_such_field": 1}]
    for field_name, field in spec.schema().fields.items():
        shape = field_schema(field)
        kind = shape.get("type")
        kinds = kind if isinstance(kind, list) else [kind]
        for value in WRONG_TYPE.get(kinds[0], []):
            if value is None and "null" in kinds:
                continue
            found.append({**sample, field_name: value})
        if "minimum" in shape:
            found.append({**sample, field_name: shape["minimum"] - 1})
        if "maximum" in shape:
            found.append({**sample, field_name: shape["maximum"] + 1})
        if "maxLength" in shape:
            found.append({**sample, field_name: "x" * (shape["maxLength"] + 1)})
        if shape.get("minLength") == 1:
            found.append({**sample, field_name: ""})
        if field.required:
            found.append({k: v for k, v in sample.items() if k != field_name})
    return found


# What the validate_<field> methods check, as json_schema_rules says it.
RULES = {
    "image_resize": [{"width": 2, "height": 2, "scale": 0}, {"width": 2, "height": 2, "scale": -1}],
    "http_fetch": [{"url": "ftp://example.com/x"}, {"url": "http://"}, {"url": "http://a b/"},
                   {"url": "file:///etc/passwd"}, {"url": "example.com"}],
    "django_task": [{"path": "nodots"}, {"path": "a..b"}, {"path": "1a.b"}, {"path": "a.b c"}],
    "send_email": [{"to": "not-an-email"}, {"to": "a@b@c"}],
    "fail_job": [{"message": "   "}],
    "merge_results": [{"label": " "}],
}  # fmt: skip


def test_every_builtin__has_a_valid_draft_2020_12_schema() -> None:
    assert set(SAMPLE_TYPES) <= set(BUILTINS)
    for name in BUILTINS:
        schema = SPECS[name].json_schema()
        assert schema_problems(schema) == [], name
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["additionalProperties"] is False  # unknown keys refused, as DRF does


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin__sample_accepted_by_both(name: str) -> None:
    assert agree(name, SPECS[name].sample("http://broker.test:8080")) == (True, True)


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin__bad_payloads_refused_by_both(name: str) -> None:
    payloads = bad_payloads(name) + RULES.get(name, [])
    assert len(payloads) >= 6
    assert [agree(name, p) for p in payloads] == [(False, False)] * len(payloads), [
        (p, agree(name, p)) for p in payloads if agree(name, p) != (False, False)
    ]


@pytest.mark.parametrize(
    ("name", "payload"),
    [
        ("sleep_job", {}),
        ("sleep_job", {"duration_seconds": 0}),
        ("image_resize", {"width": 4096, "height": 1, "scale": 1}),
        ("django_task", {"path": "a.b", "run_after": None}),
        ("send_email", {"to": "a@localhost", "subject": "", "body": ""}),
        ("http_fetch", {"url": "HTTPS://example.com:8443/a?b#c", "timeout_seconds": 0.001}),
        ("batch_import", {"rows": 1, "row_ms": 0, "checkpoint_every": 1}),
    ],
)
def test_builtins__edge_payloads__accepted_by_both(name: str, payload: Any) -> None:
    assert agree(name, payload) == (True, True)


def test_converter__field_it_knows_nothing_of__typeerror_naming_it() -> None:
    class Odd(serializers.Field):
        def to_internal_value(self, data: Any) -> Any:
            return data

    class OddPayload(PayloadSchema):
        odd = Odd()

    with pytest.raises(TypeError, match="no JSON Schema for Odd 'odd'"):
        payload_schema(OddPayload)


def test_converter__nullable_and_defaults_and_rules() -> None:
    class Payload(PayloadSchema):
        n = StrictInteger(min_value=1, allow_null=True, default=None)
        m = StrictInteger()
        json_schema_rules = {"m": {"multipleOf": 2}}

    assert payload_schema(Payload) == {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "n": {"type": ["integer", "null"], "minimum": 1, "default": None},
            "m": {"type": "integer", "multipleOf": 2},
        },
        "required": ["m"],
        "additionalProperties": False,
    }

"""contract.payloads: JSON Schemas for job types of your own, checked; payloads checked against
them, each problem named at its place."""

from __future__ import annotations

from typing import Any

import pytest

from contract.payloads import MAX_PROBLEMS, PayloadCheck, schema_problems


@pytest.mark.parametrize(
    "schema",
    [
        True,
        {},
        {"$ref": "#/$defs/a", "$defs": {"a": {"type": "integer"}}},
        {"$defs": {"a": {"$anchor": "here", "type": "string"}}, "$ref": "#here"},
        {"$id": "https://example.com/root", "$defs": {"a": {"$id": "a", "type": "integer"}},
         "$ref": "a"},
        {"$ref": "https://json-schema.org/draft/2020-12/schema"},  # the meta-schema: known here
        {"enum": [{"$ref": "http://example.com/"}]},  # data, not a reference
        {"default": {"$ref": "nowhere"}, "examples": [{"$ref": "nowhere"}]},
    ],
)  # fmt: skip
def test_schema_problems__usable_schemas__none(schema: Any) -> None:
    assert schema_problems(schema) == []


@pytest.mark.parametrize(
    ("schema", "start"),
    [
        ({"$ref": "other.json"}, "$ref 'other.json' points outside the schema"),
        ({"$ref": "#nowhere"}, "$ref '#nowhere' does not resolve inside the schema."),
        ({"items": {"$ref": "#/$defs/x"}}, "$ref '#/$defs/x' does not resolve"),
        ({"type": ["integer", "integer"]}, "Not a valid JSON Schema (draft 2020-12) (at type)"),
        ([], "Not a valid JSON Schema (draft 2020-12): [] is not of type 'object', 'boolean'"),
    ],
)
def test_schema_problems__unusable_schemas__named(schema: Any, start: str) -> None:
    (problem,) = schema_problems(schema)
    assert problem.startswith(start), problem


def test_payload_check__many_bad_items__at_most_max_problems_places() -> None:
    check = PayloadCheck({"type": "array", "items": {"type": "string"}})
    problems = check.problems(list(range(100)))
    assert len(problems) == MAX_PROBLEMS
    assert problems["0"] == ["0 is not of type 'string'"]


def test_payload_check__same_message_twice_at_one_place__once() -> None:
    check = PayloadCheck({"allOf": [{"type": "string"}, {"type": "string"}]})
    assert check.problems(1) == {"": ["1 is not of type 'string'"]}


def test_payload_check__nested_required__named_at_the_property() -> None:
    check = PayloadCheck({"properties": {"size": {"type": "object", "required": ["w", "h"]}}})
    assert check.problems({"size": {}}) == {
        "size.w": ["'w' is a required property"],
        "size.h": ["'h' is a required property"],
    }


def test_payload_check__formats_are_annotations() -> None:
    assert PayloadCheck({"type": "string", "format": "email"}).problems("not an email") == {}


@pytest.mark.parametrize(
    ("items", "unique"),
    [
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], False),  # key order does not matter
        ([1, 1.0], False),  # one number
        ([True, 1], True),  # a boolean is no number
        ([[1, {"x": None}], [1.0, {"x": None}]], False),
        (["1", 1, None, False, [], {}], True),
        ([{"a": i} for i in range(5000)], True),
    ],
)
def test_payload_check__unique_items__json_schemas_equality(items: list[Any], unique: bool) -> None:
    check = PayloadCheck({"type": "array", "uniqueItems": True})
    assert (check.problems(items) == {}) is unique


def test_payload_check__unique_items__one_pass_not_every_pair() -> None:
    # jsonschema's own compares every pair of objects: 68 s for 5000 (bench: see choices.md).
    from contract import payloads

    check = PayloadCheck({"uniqueItems": True})
    assert check._validator.VALIDATORS["uniqueItems"] is payloads._unique_items

"""Job types of your own: PUT/GET/DELETE /types (status + exact body), and the payloads of a
registered type checked at every way in (API.md "Job types of your own")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from broker import enqueue as broker_enqueue
from broker.exceptions import InvalidTaskError
from broker.models import JobType, Task
from contract.jobtypes import SPECS
from tests.api.conftest import parse_time
from tests.conftest import SAMPLE_TYPES, post

pytestmark = pytest.mark.django_db

RESIZE = {
    "type": "object",
    "required": ["path"],
    "properties": {
        "path": {"type": "string"},
        "width": {"type": "integer", "minimum": 1},
        "items": {"type": "array", "items": {"type": "string"}},
    },
}


def put(client: APIClient, name: str, body: Any) -> Any:
    return client.put(f"/types/{name}", json.dumps(body), content_type="application/json")


def typed(client: APIClient, name: str, payload: Any) -> Any:
    return post(client, "/jobs", {"type": name, "payload": payload})


def times_of(body: dict[str, Any]) -> tuple[Any, Any]:
    return parse_time(body["created_at"]), parse_time(body["updated_at"])


# -- PUT ----------------------------------------------------------------------------------------


def test_put__new_type__201_with_the_type(api_client) -> None:
    r = put(api_client, "resize_image", {"schema": RESIZE, "description": "Resize one image."})

    assert r.status_code == 201, r.content
    assert r["Location"] == "/types/resize_image"
    body = r.json()
    created, updated = times_of(body)
    assert body == {
        "name": "resize_image",
        "builtin": False,
        "schema": RESIZE,
        "description": "Resize one image.",
        "created_at": body["created_at"],
        "updated_at": body["updated_at"],
    }
    assert created == updated


def test_put__existing_type__200_replaced_created_kept_updated_moved(api_client) -> None:
    first = put(api_client, "resize_image", {"schema": RESIZE}).json()

    r = put(api_client, "resize_image", {"schema": None, "description": "any payload now"})

    assert r.status_code == 200, r.content
    body = r.json()
    assert (body["schema"], body["description"]) == (None, "any payload now")
    assert body["created_at"] == first["created_at"]
    assert parse_time(body["updated_at"]) >= parse_time(first["updated_at"])
    assert JobType.objects.get().updated_at > JobType.objects.get().created_at


def test_put__empty_object__a_type_with_no_schema_and_no_description(api_client) -> None:
    r = put(api_client, "anything.goes", {})
    assert r.status_code == 201, r.content
    assert (r.json()["schema"], r.json()["description"]) == (None, "")


@pytest.mark.parametrize("schema", [True, False, {}, {"const": "a\u0000b\ud800"}])
def test_put__any_draft_2020_12_schema__kept_exactly_as_sent(api_client, schema) -> None:
    assert put(api_client, "t", {"schema": schema}).status_code == 201
    assert api_client.get("/types/t").json()["schema"] == schema


@pytest.mark.parametrize("name", (*SAMPLE_TYPES, "django_task"))
def test_put__builtin_name__409_and_nothing_stored(api_client, name: str) -> None:
    r = put(api_client, name, {"schema": None})
    assert r.status_code == 409
    assert r.json() == {"error": f"{name} is a built-in job type: it cannot be replaced."}
    assert not JobType.objects.exists()


@pytest.mark.parametrize(
    "name", ["Resize", "1resize", "_resize", "resize image", "a" * 65, "résumé", "a\u0000"]
)
def test_put__name_not_matching_the_rule__400_naming_name(api_client, name: str) -> None:
    r = put(api_client, name, {"schema": None})
    assert r.status_code == 400
    assert r.json() == {
        "error": "Invalid name: Must match [a-z][a-z0-9_.-]{0,63}.",
        "fields": {"name": ["Must match [a-z][a-z0-9_.-]{0,63}."]},
    }


def test_put__longest_name__201(api_client) -> None:
    name = "a" + "b.-_9" * 12 + "xyz"
    assert len(name) == 64
    assert put(api_client, name, {}).status_code == 201


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "integr"},
            "Not a valid JSON Schema (draft 2020-12) (at type): 'integr' is not valid under "
            "any of the given schemas",
        ),
        (
            {"minimum": "1"},
            "Not a valid JSON Schema (draft 2020-12) (at minimum): '1' is not of type 'number'",
        ),
        (5, "Not a valid JSON Schema (draft 2020-12): 5 is not of type 'object', 'boolean'"),
        (
            {"$ref": "http://169.254.169.254/latest/meta-data"},
            "$ref 'http://169.254.169.254/latest/meta-data' points outside the schema: "
            "references resolve only inside it.",
        ),
        ({"$ref": "#/$defs/missing"}, "$ref '#/$defs/missing' does not resolve inside the schema."),
    ],
)
def test_put__schema_not_valid__400_naming_schema(api_client, schema, message: str) -> None:
    r = put(api_client, "t", {"schema": schema})
    assert r.status_code == 400
    assert r.json() == {"error": f"Invalid schema: {message}", "fields": {"schema": [message]}}
    assert not JobType.objects.exists()


def test_put__schema_nesting_past_the_limit__400_naming_schema(api_client) -> None:
    schema: dict[str, Any] = {}
    for _ in range(70):
        schema = {"items": schema}
    r = put(api_client, "t", {"schema": schema})
    assert r.status_code == 400
    assert r.json()["fields"] == {"schema": ["Nests more than 64 levels deep."]}


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"schema": None, "descripton": "x"}, {"descripton": ["Unknown field."]}),
        ({"description": None}, {"description": ["Must be a string."]}),
        ({"description": "x" * 1001}, {"description": ["At most 1000 characters."]}),
        (
            {"description": "a\u0000"},
            {"description": ["Holds U+0000 or a lone surrogate, which cannot be stored."]},
        ),
        (
            {"description": "\ud800"},
            {"description": ["Holds U+0000 or a lone surrogate, which cannot be stored."]},
        ),
    ],
)
def test_put__bad_body_field__400_naming_it(api_client, body, fields) -> None:
    r = put(api_client, "t", body)
    assert r.status_code == 400
    assert r.json()["fields"] == fields
    assert not JobType.objects.exists()


def test_put__description_of_1000_characters__201(api_client) -> None:
    assert put(api_client, "t", {"description": "é" * 1000}).status_code == 201


@pytest.mark.parametrize(
    ("raw", "content_type", "status", "expected"),
    [
        (b"", "application/json", 400, {"error": "A JSON body is required.",
                                        "fields": {"body": ["A JSON body is required."]}}),
        (b"[]", "application/json", 400, {"error": "The body must be a JSON object.",
                                          "fields": {"body": ["Expected a JSON object."]}}),
        (b"schema=1", "application/x-www-form-urlencoded", 415, None),
    ],
)  # fmt: skip
def test_put__not_a_json_object__error_json(api_client, raw, content_type, status, expected):
    r = api_client.put("/types/t", raw, content_type=content_type)
    assert r.status_code == status
    assert "error" in r.json()
    if expected is not None:
        assert r.json() == expected
    assert not JobType.objects.exists()


# -- GET ----------------------------------------------------------------------------------------


def test_get_types__builtins_with_their_schemas_and_yours_by_name(api_client) -> None:
    put(api_client, "zeta", {"schema": RESIZE, "description": "last"})
    put(api_client, "alpha", {})

    r = api_client.get("/types")

    assert r.status_code == 200
    results = r.json()["results"]
    assert list(r.json()) == ["results"]
    names = [t["name"] for t in results]
    assert names == sorted([*SPECS, "alpha", "zeta"])
    by_name = {t["name"]: t for t in results}
    for name, spec in SPECS.items():
        assert by_name[name] == {
            "name": name,
            "builtin": True,
            "schema": spec.json_schema(),
            "description": spec.description,
            "created_at": None,
            "updated_at": None,
        }
    assert by_name["zeta"]["builtin"] is False
    assert (by_name["zeta"]["schema"], by_name["zeta"]["description"]) == (RESIZE, "last")


def test_get_type__builtin__200_with_its_schema(api_client) -> None:
    r = api_client.get("/types/sleep_job")
    assert r.status_code == 200
    assert r.json() == {
        "name": "sleep_job",
        "builtin": True,
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "duration_seconds": {"type": "number", "minimum": 0, "maximum": 3600, "default": 3}
            },
            "additionalProperties": False,
        },
        "description": "Sleeps duration_seconds (default 3, at most 3600).",
        "created_at": None,
        "updated_at": None,
    }


def test_get_type__yours__200_as_the_put_answered(api_client) -> None:
    made = put(api_client, "resize_image", {"schema": RESIZE}).json()
    r = api_client.get("/types/resize_image")
    assert (r.status_code, r.json()) == (200, made)


@pytest.mark.parametrize("name", ["nope", "Nope", "a" * 65, "%00"])
def test_get_type__unknown__404(api_client, name: str) -> None:
    r = api_client.get(f"/types/{name}")
    assert (r.status_code, r.json()) == (404, {"error": "No such job type."})


# -- DELETE -------------------------------------------------------------------------------------


def test_delete__yours__204_then_404_and_enqueues_refused(api_client, task) -> None:
    put(api_client, "resize_image", {"schema": RESIZE})
    pk = typed(api_client, "resize_image", {"path": "a.png"}).json()["id"]

    r = api_client.delete("/types/resize_image")

    assert (r.status_code, r.content) == (204, b"")
    assert api_client.get("/types/resize_image").status_code == 404
    assert api_client.delete("/types/resize_image").json() == {"error": "No such job type."}
    assert task(pk)["type"] == "resize_image"  # tasks already enqueued keep their type
    assert typed(api_client, "resize_image", {"path": "b.png"}).json() == {
        "error": "Invalid type: Unknown job type 'resize_image'.",
        "fields": {"type": ["Unknown job type 'resize_image'."]},
    }


def test_delete__builtin__409(api_client) -> None:
    r = api_client.delete("/types/sleep_job")
    assert (r.status_code, r.json()) == (
        409,
        {"error": "sleep_job is a built-in job type: it cannot be deleted."},
    )


def test_delete__unknown__404(api_client) -> None:
    r = api_client.delete("/types/nope")
    assert (r.status_code, r.json()) == (404, {"error": "No such job type."})


def test_types__method_not_served__405_json(api_client) -> None:
    assert api_client.post("/types/t", {}, format="json").status_code == 405
    assert api_client.delete("/types").status_code == 405
    assert "error" in api_client.patch("/types/t", {}, format="json").json()


# -- enqueue with a type of your own -----------------------------------------------------------


def test_enqueue__payload_the_schema_accepts__201(api_client, task) -> None:
    put(api_client, "resize_image", {"schema": RESIZE})
    r = typed(api_client, "resize_image", {"path": "a.png", "width": 3})
    assert r.status_code == 201, r.content
    assert task(r.json()["id"])["type"] == "resize_image"


@pytest.mark.parametrize(
    ("payload", "fields"),
    [
        ({}, {"payload.path": ["'path' is a required property"]}),
        ({"path": "a", "width": 0}, {"payload.width": ["0 is less than the minimum of 1"]}),
        ({"path": "a", "width": "3"}, {"payload.width": ["'3' is not of type 'integer'"]}),
        (
            {"path": "a", "items": ["x", "y", 3]},
            {"payload.items.2": ["3 is not of type 'string'"]},
        ),
        ([1], {"payload": ["[1] is not of type 'object'"]}),
        (
            {"width": 0},
            {
                "payload.path": ["'path' is a required property"],
                "payload.width": ["0 is less than the minimum of 1"],
            },
        ),
    ],
)
def test_enqueue__payload_the_schema_refuses__400_naming_the_place(
    api_client, payload, fields
) -> None:
    put(api_client, "resize_image", {"schema": RESIZE})
    r = typed(api_client, "resize_image", payload)
    assert r.status_code == 400
    assert r.json()["fields"] == fields
    assert r.json()["error"].startswith(f"Invalid {next(iter(fields))}: ")
    assert not Task.objects.exists()


def test_enqueue__unexpected_property__named_at_the_property(api_client) -> None:
    put(api_client, "strict", {"schema": {"type": "object", "additionalProperties": False}})
    r = typed(api_client, "strict", {"a": 1, "b": 2})
    assert r.json()["fields"] == {
        "payload.a": ["Additional properties are not allowed ('a', 'b' were unexpected)"],
        "payload.b": ["Additional properties are not allowed ('a', 'b' were unexpected)"],
    }


def test_enqueue__null_schema__any_payload(api_client) -> None:
    put(api_client, "loose", {"schema": None})
    for payload in (None, 1, "x", [1, {"a": None}], {"a": 1}):
        assert typed(api_client, "loose", payload).status_code == 201


def test_enqueue__schema_changed__the_next_enqueue_checks_with_the_new_one(api_client) -> None:
    put(api_client, "t", {"schema": {"type": "integer"}})
    assert typed(api_client, "t", 1).status_code == 201
    put(api_client, "t", {"schema": {"type": "string"}})
    assert typed(api_client, "t", 1).status_code == 400
    assert typed(api_client, "t", "one").status_code == 201
    api_client.delete("/types/t")
    put(api_client, "t", {"schema": {"type": "integer"}})  # a new row, a new compiled schema
    assert typed(api_client, "t", 1).status_code == 201


def test_enqueue__payload_deeper_than_a_recursive_schema_can_check__400_not_500(
    api_client,
) -> None:
    tree = {"$defs": {"n": {"type": ["array", "integer"], "items": {"$ref": "#/$defs/n"}}},
            "$ref": "#/$defs/n"}  # fmt: skip
    put(api_client, "tree", {"schema": tree})
    payload: Any = 1
    for _ in range(250):
        payload = [payload]
    r = typed(api_client, "tree", payload)
    assert r.status_code == 400
    assert r.json()["fields"] == {
        "payload": ["Nests too deep to be checked against its type's schema."]
    }


def test_enqueue__huge_bad_value__message_cut(api_client) -> None:
    put(api_client, "t", {"schema": {"type": "object", "properties": {"s": {"maxLength": 3}}}})
    r = typed(api_client, "t", {"s": "x" * 100_000})
    (message,) = r.json()["fields"]["payload.s"]
    assert len(message) == 300 and message.endswith("…")


def test_enqueue__unknown_type__400_as_before(api_client) -> None:
    assert typed(api_client, "never_registered", {}).json()["fields"] == {
        "type": ["Unknown job type 'never_registered'."]
    }


def test_batch__each_item_checked__bad_ones_named_by_index(api_client) -> None:
    put(api_client, "t", {"schema": {"type": "integer"}})
    r = post(api_client, "/jobs/batch", {"jobs": [
        {"type": "t", "payload": 1}, {"type": "t", "payload": "x"}, {"payload": "untyped"},
    ]})  # fmt: skip
    assert r.status_code == 400
    assert r.json()["fields"] == {"jobs.1.payload": ["'x' is not of type 'integer'"]}
    assert not Task.objects.exists()


def _queries(call: Any) -> int:
    with CaptureQueriesContext(connection) as ctx:
        call()
    return len(ctx.captured_queries)


def test_batch__each_distinct_type_read_once(api_client) -> None:
    put(api_client, "a", {"schema": {"type": "integer"}})
    put(api_client, "b", {})
    plain = [{"payload": n, "queue": "q"} for n in range(6)]
    mixed = [{"payload": n, "type": "ab"[n % 2], "queue": "q"} for n in range(6)]
    builtin = [{"payload": {}, "type": "sleep_job", "queue": "q"} for n in range(6)]

    def batch(jobs: list[dict[str, Any]]) -> None:
        assert post(api_client, "/jobs/batch", {"jobs": jobs}).status_code == 201

    assert _queries(lambda: batch(mixed)) == _queries(lambda: batch(plain)) + 2
    assert _queries(lambda: batch(builtin)) == _queries(lambda: batch(plain))


def test_workflow__steps_checked_by_their_types_schemas(api_client) -> None:
    put(api_client, "t", {"schema": {"type": "integer"}})
    r = post(api_client, "/workflows", {"name": "w", "steps": [
        {"ref": "a", "job": {"type": "t", "payload": 1}},
        {"ref": "b", "job": {"type": "t", "payload": "x"}, "after": ["a"]},
    ]})  # fmt: skip
    assert r.status_code == 400
    assert r.json()["fields"] == {"steps.1.job.payload": ["'x' is not of type 'integer'"]}


def test_schedule__job_checked_by_its_types_schema(api_client) -> None:
    put(api_client, "t", {"schema": {"type": "integer"}})
    r = post(api_client, "/schedules", {"name": "s", "every_s": 60,
                                        "job": {"type": "t", "payload": "x"}})  # fmt: skip
    assert r.status_code == 400
    assert r.json()["fields"] == {"job.payload": ["'x' is not of type 'integer'"]}


def test_broker_enqueue__checks_with_the_schema(api_client) -> None:
    put(api_client, "t", {"schema": {"type": "integer"}})
    assert broker_enqueue(1, type="t")
    with pytest.raises(InvalidTaskError) as caught:
        broker_enqueue("x", type="t")
    assert caught.value.fields == {"payload": ["'x' is not of type 'integer'"]}


@pytest.mark.parametrize("job_type", SAMPLE_TYPES)
def test_enqueue__builtin_types__validated_by_their_contract_as_before(
    api_client, job_type: str
) -> None:
    payload = SPECS[job_type].sample("http://broker.test:8080")
    assert typed(api_client, job_type, payload).status_code == 201
    assert typed(api_client, job_type, {**payload, "unknown_key": 1}).json()["fields"] == {
        "payload.unknown_key": ["Unknown field."]
    }


def test_types__tokens_set__401_without_one(api_client, settings) -> None:
    settings.BROKER_API_TOKENS = ["types-token"]
    assert api_client.get("/types").status_code == 401
    assert put(api_client, "t", {}).status_code == 401
    assert not JobType.objects.exists()
    api_client.credentials(HTTP_AUTHORIZATION="Bearer types-token")
    assert api_client.get("/types").status_code == 200
    assert put(api_client, "t", {}).status_code == 201

"""The OpenAPI of /types: its operations and shapes, merged into the API's by broker/api."""

from __future__ import annotations

from broker.api.schema_components import _TIME_OR_NULL, Schema, _object, ref
from broker.api.schema_operations import _body, _op, answer, error_answer
from broker.types.catalog import BuiltinType, TypeNotFound
from contract import limits

_NAME: Schema = {"type": "string", "pattern": f"^{limits.TYPE_NAME_RULE}$"}
_SCHEMA: Schema = {
    "nullable": True,
    "description": "A JSON Schema (draft 2020-12) its payloads must match; null: any payload. "
    "References resolve only inside it.",
}
_DESCRIPTION: Schema = {"type": "string", "maxLength": limits.MAX_TYPE_DESCRIPTION}

COMPONENTS: dict[str, Schema] = {
    "JobTypeRequest": _object(
        {
            "schema": {**_SCHEMA, "default": None},
            "description": {**_DESCRIPTION, "default": ""},
        },
        [],
        closed=True,
    ),
    "JobType": _object(
        {
            "name": _NAME,
            "builtin": {
                "type": "boolean",
                "description": "Built in: its rules are the broker's own; it cannot be "
                "replaced or deleted. Its schema is made from them.",
            },
            "schema": _SCHEMA,
            "description": _DESCRIPTION,
            "created_at": {**_TIME_OR_NULL, "description": "null for a built-in type."},
            "updated_at": {**_TIME_OR_NULL, "description": "null for a built-in type."},
        },
        ["name", "builtin", "schema", "description", "created_at", "updated_at"],
    ),
    "JobTypeList": _object(
        {"results": {"type": "array", "items": ref("JobType"), "description": "By name."}},
        ["results"],
    ),
}

_TYPE_NAME = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": f"The type's name, `{limits.TYPE_NAME_RULE}`.",
}
_NO_TYPE = error_answer(TypeNotFound().message)
_BUILTIN = error_answer(BuiltinType().message)

OPERATIONS: dict[str, dict[str, Schema]] = {
    "broker.types.views.TypesView": {
        "get": _op(
            "list_types",
            "List job types, the built-in ones included",
            "types",
            {200: answer("Each with its payload's JSON Schema.", ref("JobTypeList"))},
        ),
    },
    "broker.types.views.TypeView": {
        "get": _op(
            "get_type",
            "One job type",
            "types",
            {200: answer("The type.", ref("JobType")), 404: _NO_TYPE},
            parameters=[_TYPE_NAME],
        ),
        "put": _op(
            "put_type",
            "Create or replace a job type of your own",
            "types",
            {
                201: answer(
                    "Created; every broker process checks payloads of this type with its "
                    "schema from now on.",
                    ref("JobType"),
                    Location={"description": "`/types/{name}`.", "schema": {"type": "string"}},
                ),
                200: answer("Replaced.", ref("JobType")),
                400: error_answer(
                    "A bad name, or a schema that is not a JSON Schema (draft 2020-12); `fields` "
                    "names each (`name`, `schema`, `description`)."
                ),
                409: _BUILTIN,
            },
            parameters=[_TYPE_NAME],
            requestBody=_body(ref("JobTypeRequest"), required=True),
        ),
        "delete": _op(
            "delete_type",
            "Delete a job type of your own; tasks already enqueued keep their type",
            "types",
            {204: answer("Deleted."), 404: _NO_TYPE, 409: _BUILTIN},
            parameters=[_TYPE_NAME],
        ),
    },
}

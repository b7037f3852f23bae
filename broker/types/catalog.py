"""The job types: the built-in ones (contract/jobtypes) and those of your own (JobType rows),
as API.md's <type>; the rules of PUT /types/{name} and the changes it, DELETE and admin make."""

from __future__ import annotations

import functools
import json
from datetime import timedelta
from typing import Any

import orjson
from django.db import IntegrityError, transaction

from broker.api.representation import timestamp
from broker.exceptions import BrokerError, InvalidFields, NotFound
from broker.models import JobType
from broker.queue.base import current_time
from contract import limits
from contract.jobtypes import SPECS
from contract.payloads import schema_problems

FIELDS = ("schema", "description")
_TICK = timedelta(microseconds=1)


class TypeNotFound(NotFound):
    """No such job type."""


class BuiltinType(BrokerError):
    """A built-in job type cannot be replaced or deleted."""

    status_code = 409


class TypeProblems(InvalidFields):
    """A PUT /types body or name the rules refuse; `fields` names each problem."""


@functools.cache
def builtins() -> dict[str, dict[str, Any]]:
    """Each built-in type as a <type>, its schema made from its contract, once per process."""
    return {
        name: {
            "name": name,
            "builtin": True,
            "schema": spec.json_schema(),
            "description": spec.description,
            "created_at": None,
            "updated_at": None,
        }
        for name, spec in sorted(SPECS.items())
    }


def is_builtin(name: str) -> bool:
    """Whether a built-in type has this name (SPECS: no query)."""
    return name in SPECS


def describe(row: JobType) -> dict[str, Any]:
    """API.md's <type> of a row; its schema is the stored JSON text, spliced in unparsed (so a
    lone surrogate in a string comes back as sent, as a payload's does)."""
    return {
        "name": row.name,
        "builtin": False,
        "schema": None if row.schema is None else orjson.Fragment(row.schema),
        "description": row.description,
        "created_at": timestamp(row.created_at),
        "updated_at": timestamp(row.updated_at),
    }


def listing() -> list[dict[str, Any]]:
    """Every type, built-in and your own, by name. A built-in type wins over a row of its name
    (one made before a new version of the broker brought the type): it is what enqueue applies."""
    found = {**{row.name: describe(row) for row in JobType.objects.all()}, **builtins()}
    return [found[name] for name in sorted(found)]


def _named(name: str) -> str:
    """The name, when a type could have it; else TypeNotFound, without asking the database."""
    if not limits.TYPE_NAME_RE.fullmatch(name):
        raise TypeNotFound()
    return name


def get(name: str) -> dict[str, Any]:
    """One type's <type>; raises TypeNotFound."""
    if is_builtin(name):
        return builtins()[name]
    row = JobType.objects.filter(name=_named(name)).first()
    if row is None:
        raise TypeNotFound()
    return describe(row)


def name_problems(name: Any) -> dict[str, list[str]]:
    """What is wrong with `name` as a new type's name ({} when nothing)."""
    if not isinstance(name, str) or not limits.TYPE_NAME_RE.fullmatch(name):
        return {"name": [limits.TYPE_NAME_MESSAGE]}
    return {}


def checked(body: Any) -> tuple[str | None, str]:
    """A PUT /types body → (the schema as JSON text or None, the description). `schema`
    defaults to null (any payload), `description` to "". Raises TypeProblems."""
    if not isinstance(body, dict):
        raise TypeProblems({"body": ["Must be a JSON object."]})
    found = {key: ["Unknown field."] for key in body if key not in FIELDS}
    schema = body.get("schema")
    if schema is not None:
        problems = schema_problems(schema)
        if problems:
            found["schema"] = problems
    description = body.get("description", "")
    if not isinstance(description, str):
        found["description"] = ["Must be a string."]
    elif len(description) > limits.MAX_TYPE_DESCRIPTION:
        found["description"] = [f"At most {limits.MAX_TYPE_DESCRIPTION} characters."]
    elif not _storable(description):
        found["description"] = ["Holds U+0000 or a lone surrogate, which cannot be stored."]
    if found:
        raise TypeProblems(found)
    # ASCII escapes: any string of the schema (U+0000, lone surrogates) stays storable.
    text = None if schema is None else json.dumps(schema, ensure_ascii=True, separators=(",", ":"))
    return text, description


def _storable(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def put(name: str, body: Any) -> tuple[JobType, bool]:
    """Create or replace the type `name`: (its row, whether it is new).

    Raises TypeProblems (a bad name or body), BuiltinType (a built-in's name).
    """
    problems = name_problems(name)
    if problems:
        raise TypeProblems(problems)
    if is_builtin(name):
        raise BuiltinType(f"{name} is a built-in job type: it cannot be replaced.")
    schema, description = checked(body)
    for _ in range(2):  # a PUT of the same new name may insert between our read and our insert
        with transaction.atomic():
            row = JobType.objects.select_for_update().filter(name=name).first()
            now = current_time()
            if row is not None:
                row.schema, row.description = schema, description
                # Forward, always: (id, updated_at) must name this version and no other.
                row.updated_at = max(now, row.updated_at + _TICK)
                row.save(update_fields=["schema", "description", "updated_at"])
                return row, False
            row = JobType(name=name, schema=schema, description=description,
                          created_at=now, updated_at=now)  # fmt: skip
            try:
                with transaction.atomic():
                    row.save(force_insert=True)
            except IntegrityError:
                continue
            return row, True
    raise BrokerError("The job type changed under this request; try again.")


def delete(name: str) -> None:
    """Delete a type of your own; tasks already enqueued keep their type.

    Raises BuiltinType, TypeNotFound.
    """
    if is_builtin(name):
        raise BuiltinType(f"{name} is a built-in job type: it cannot be deleted.")
    if not JobType.objects.filter(name=_named(name)).delete()[0]:
        raise TypeNotFound()


def delete_many(names: list[str]) -> int:
    """Delete these types of your own (admin); how many were."""
    deleted, _ = JobType.objects.filter(name__in=names).delete()
    return int(deleted)

"""JSON Schema (draft 2020-12) for the payloads of job types of your own, as both sides apply it:
a schema checked against the meta-schema, and a payload checked against a schema with each
problem named where it is (`width`, `items.2`; "" for the payload as a whole).

The `jsonschema` library does the work. References resolve only inside the schema: a `$ref` to
a URL is never fetched (jsonschema's default registry would fetch it, from the broker's host).
Formats (`"format": "email"`) are annotations, as the draft says by default, so the broker and
every worker agree whatever optional libraries each has installed.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any
from urllib.parse import urldefrag, urljoin

from contract.limits import MAX_SCHEMA_DEPTH, nests_at_most

DIALECT = "https://json-schema.org/draft/2020-12/schema"
# A refused payload names at most this many places, each message cut to this many characters:
# jsonschema's messages quote the value, which may be most of a 256 KiB body.
MAX_PROBLEMS = 20
MAX_MESSAGE = 300
TOO_DEEP = "Nests too deep to be checked against its type's schema."


def _cut(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"


def _registry() -> Any:
    """A registry that knows the meta-schemas and retrieves nothing."""
    import referencing

    return referencing.Registry()


@functools.cache
def _validator_class() -> Any:
    """Draft 2020-12's validator with a `uniqueItems` linear in the array: jsonschema's own
    compares every pair of items that do not sort (objects, arrays of mixed types), and an array
    of 5000 objects took 68 s of an enqueue."""
    from jsonschema import Draft202012Validator, validators

    return validators.extend(Draft202012Validator, {"uniqueItems": _unique_items})


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if unique and validator.is_type(instance, "array"):
        seen: set[Any] = set()
        for item in instance:
            key = _canonical(item)
            if key in seen:
                yield ValidationError(f"{instance!r} has non-unique elements")
                return
            seen.add(key)


def _canonical(value: Any) -> Any:
    """A hashable key equal for values JSON Schema calls equal: 1 and 1.0 alike, true not 1,
    objects whatever their key order."""
    if isinstance(value, bool) or value is None:
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)  # 1 == 1.0, and hash(1) == hash(1.0)
    if isinstance(value, list):
        return ("a", tuple(_canonical(item) for item in value))
    if isinstance(value, dict):
        return ("o", frozenset((key, _canonical(item)) for key, item in value.items()))
    return ("s", value)


def schema_problems(schema: Any) -> list[str]:
    """What makes `schema` unusable as a job type's payload schema; [] when nothing does.

    Checked: nesting (at most MAX_SCHEMA_DEPTH), the draft 2020-12 meta-schema, and that every
    `$ref` resolves inside the schema itself.
    """
    from jsonschema.exceptions import SchemaError

    if not nests_at_most(schema, MAX_SCHEMA_DEPTH):
        return [f"Nests more than {MAX_SCHEMA_DEPTH} levels deep."]
    try:
        _validator_class().check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(part) for part in exc.absolute_path)
        at = f" (at {where})" if where else ""
        return [_cut(f"Not a valid JSON Schema (draft 2020-12){at}: {exc.message}")]
    except RecursionError:
        return [f"Nests more than {MAX_SCHEMA_DEPTH} levels deep."]
    return [_cut(problem) for problem in _unresolved(schema)]


def _unresolved(schema: Any) -> Iterator[str]:
    """A sentence per `$ref` that does not resolve inside the schema."""
    from jsonschema_specifications import REGISTRY as SPECIFICATIONS
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    try:
        resource = DRAFT202012.create_resource(schema)
        root = resource.id() or ""
        registry = SPECIFICATIONS.combine(_registry().with_resource(root, resource)).crawl()
    except Exception as exc:  # ids that clash or do not parse: no reference can be trusted
        yield f"Its $id cannot be used: {exc}"
        return
    resolver = registry.resolver(base_uri=root)
    for base, ref in _refs(schema, root):
        target = urljoin(base, ref)
        if urldefrag(target).url and urldefrag(target).url not in registry:
            yield f"$ref {ref!r} points outside the schema: references resolve only inside it."
            continue
        try:
            resolver.lookup(target)
        except Unresolvable:
            yield f"$ref {ref!r} does not resolve inside the schema."
        except Exception as exc:  # a malformed pointer or anchor
            yield f"$ref {ref!r} cannot be resolved: {exc}"


# Keywords whose values are data, not schemas: a "$ref" key there is no reference.
_DATA = frozenset({"const", "enum", "default", "examples"})


def _refs(schema: Any, base: str) -> Iterator[tuple[str, str]]:
    """(base URI, ref) of every `$ref` in the schema, the base moved by each `$id` on the way."""
    stack = [(schema, base)]
    while stack:
        node, here = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("$id"), str):
                here = urljoin(here, node["$id"])
            if isinstance(node.get("$ref"), str):
                yield here, node["$ref"]
            stack.extend((value, here) for key, value in node.items() if key not in _DATA)
        elif isinstance(node, list):
            stack.extend((item, here) for item in node)


class PayloadCheck:
    """A schema compiled once: problems(payload) names what the payload breaks.

    Raises jsonschema's SchemaError when made from a schema schema_problems() refuses.
    """

    def __init__(self, schema: Any) -> None:
        """schema: a JSON Schema (draft 2020-12), as JSON values."""
        kind = _validator_class()
        kind.check_schema(schema)
        self.schema = schema
        self._validator = kind(schema, registry=_registry())

    def problems(self, payload: Any) -> dict[str, list[str]]:
        """{place: [messages]} ({} for a payload the schema accepts): the place is a dotted path
        into the payload ("width", "items.2"), "" for the payload as a whole; a missing
        required property and an unexpected one are named where they would be."""
        from referencing.exceptions import Unresolvable

        try:
            if self._validator.is_valid(payload):
                return {}
            return self._named(payload)
        except RecursionError:
            return {"": [TOO_DEEP]}
        except Unresolvable as exc:  # schema_problems refuses these; a schema saved before
            return {"": [_cut(f"Its type's schema has a $ref that does not resolve: {exc}")]}

    def _named(self, payload: Any) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for error in self._validator.iter_errors(payload):
            path = [str(part) for part in error.absolute_path]
            for place in _places(error, path):
                messages = found.setdefault(place, [])
                message = _cut(error.message)
                if message not in messages:
                    messages.append(message)
            if len(found) >= MAX_PROBLEMS:
                break
        return found


def _places(error: Any, path: list[str]) -> list[str]:
    """Where an error is: a missing or unexpected property at the property, else at its path."""
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        missing = [p for p in error.validator_value if p not in instance]
        named = [p for p in missing if error.message == f"{p!r} is a required property"]
        return [".".join([*path, str(p)]) for p in named[:1]] or [".".join(path)]
    if error.validator == "additionalProperties" and error.validator_value is False:
        schema = error.schema if isinstance(error.schema, dict) else {}
        known = schema.get("properties") or {}
        patterns = list(schema.get("patternProperties") or {})
        if isinstance(instance, dict) and not patterns:
            extras = [key for key in instance if key not in known]
            if extras:
                return [".".join([*path, key]) for key in extras]
    return [".".join(path)]

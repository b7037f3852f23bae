"""Job types: one module per type in this package, found on first use of REGISTRY.

A module here (not starting with "_") defines `JOB_TYPE = JobType(...)`: its name, a DRF
Serializer as the payload schema, and the handler. Adding a type is adding such a module.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

# The key of a problem with the payload as a whole (not an object, a cross-field rule); the
# broker reports it as the field "payload" itself.
WHOLE_PAYLOAD = ""


class JobTypeLike(Protocol):
    """What a registered job type offers the worker (and, optionally, `validate`, the broker)."""

    def handler(self, payload: Any) -> Any:
        """Run one job; the return value becomes the ack's result."""
        ...


class InvalidPayloadError(ValueError):
    """A payload the type's schema refuses; the message names each offending field."""

    def __init__(self, name: str, problems: Mapping[str, list[str]]) -> None:
        """problems maps field name (WHOLE_PAYLOAD for the payload itself) to messages."""
        detail = "; ".join(
            f"{field or 'payload'}: {' '.join(msgs)}" for field, msgs in problems.items()
        )
        super().__init__(f"invalid {name} payload: {detail}")
        self.problems = dict(problems)


@dataclass(frozen=True)
class JobType:
    """A job type: `schema` validates and fills in the payload, `run` does the work.

    schema is a DRF Serializer class; payload keys it does not declare are refused, like
    unknown body fields. sample(broker_url) is the payload `manage.py submit` sends.
    """

    name: str
    schema: type[Any]
    run: Callable[[dict[str, Any]], Any]
    description: str = ""
    sample: Callable[[str], dict[str, Any]] = lambda broker_url: {}

    def parse(self, payload: Any) -> tuple[dict[str, Any] | None, dict[str, list[str]]]:
        """(validated payload with defaults, {}) or (None, {field: [messages]})."""
        if not isinstance(payload, dict):
            return None, {WHOLE_PAYLOAD: [f"The {self.name} payload must be a JSON object."]}
        serializer = self.schema(data=payload)
        problems = {key: ["Unknown field."] for key in payload if key not in serializer.fields}
        if not serializer.is_valid():
            problems.update(_flatten(serializer.errors))
        if problems:
            return None, problems
        return dict(serializer.validated_data), {}

    def validate(self, payload: Any) -> dict[str, list[str]] | None:
        """The broker's check at enqueue: {field: [messages]}, or None when the payload is fine."""
        return self.parse(payload)[1] or None

    def handler(self, payload: Any) -> Any:
        """Validate (filling defaults) and run; raises InvalidPayloadError on a bad payload."""
        data, problems = self.parse(payload)
        if data is None:
            raise InvalidPayloadError(self.name, problems)
        return self.run(data)


def _flatten(errors: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail → {"a.b": [messages]}; non-field errors → WHOLE_PAYLOAD."""
    if isinstance(errors, Mapping):
        flat: dict[str, list[str]] = {}
        for key, value in errors.items():
            name = WHOLE_PAYLOAD if key == "non_field_errors" else str(key)
            flat.update(_flatten(value, _dotted(prefix, name)))
        return flat
    if isinstance(errors, list) and errors and all(isinstance(e, Mapping) for e in errors):
        flat = {}
        for index, item in enumerate(errors):
            flat.update(_flatten(item, _dotted(prefix, str(index))))
        return flat
    messages = errors if isinstance(errors, list) else [errors]
    return {prefix: [str(m) for m in messages]}


def _dotted(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix and name else prefix or name


J = TypeVar("J", bound=JobTypeLike)


class Registry(MutableMapping[str, JobTypeLike]):
    """name → job type; the package's modules are imported on the first lookup, once.

    Lazy so that importing this package (the broker does, for typed enqueues) stays cheap and
    free of import cycles.
    """

    def __init__(self, package: str, path: Iterable[str]) -> None:
        """package is the dotted name whose modules (on path) declare JOB_TYPE."""
        self._package, self._path = package, list(path)
        self._types: dict[str, JobTypeLike] = {}
        self._loaded = self._loading = False
        self._lock = threading.RLock()

    def _load(self) -> dict[str, JobTypeLike]:
        if not self._loaded:
            with self._lock:
                if self._loading:  # same thread: a type module used REGISTRY while imported
                    raise RuntimeError("job type modules must not use REGISTRY at import time")
                if not self._loaded:
                    self._loading = True
                    try:
                        for name, jobtype in discover(self._package, self._path):
                            _add(self._types, name, jobtype)
                    finally:
                        self._loading = False
                    self._loaded = True
        return self._types

    def __getitem__(self, name: str) -> JobTypeLike:
        return self._load()[name]

    def __setitem__(self, name: str, jobtype: JobTypeLike) -> None:
        self._load()[name] = jobtype

    def __delitem__(self, name: str) -> None:
        del self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._load()))

    def __len__(self) -> int:
        return len(self._load())

    def __repr__(self) -> str:
        return f"Registry({sorted(self._load())!r})"


def discover(package: str, path: Iterable[str]) -> list[tuple[str, JobType]]:
    """Import every public module of package and collect its JOB_TYPE, sorted by module name.

    Raises TypeError for a module without a JobType JOB_TYPE: a half-written type is a bug.
    """
    found = []
    for module_info in sorted(pkgutil.iter_modules(list(path)), key=lambda m: m.name):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{module_info.name}")
        jobtype = getattr(module, "JOB_TYPE", None)
        if not isinstance(jobtype, JobType):
            raise TypeError(f"{module.__name__} must define JOB_TYPE = JobType(...)")
        found.append((jobtype.name, jobtype))
    return found


def _add(types: MutableMapping[str, Any], name: str, jobtype: Any) -> None:
    if name in types and types[name] is not jobtype:
        raise ValueError(f"job type already registered: {name}")
    types[name] = jobtype


REGISTRY: MutableMapping[str, JobTypeLike] = Registry(__name__, __path__)


def register(name: str, jobtype: J) -> J:
    """Register jobtype under name and return it; raises ValueError if name is already taken."""
    _add(REGISTRY, name, jobtype)
    return jobtype

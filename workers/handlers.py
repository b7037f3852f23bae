"""Handlers: `@handler("resize_image", schema={...})` declares the function that runs the tasks of
a job type, in your module (`runworker --handlers`) and, the same way, in workers/jobtypes for the
built-in types. The worker finds a task's handler with one dict lookup; an untyped task goes to
the log file.

    from workers import handler

    @handler("resize_image", schema={"type": "object", "required": ["path"]})
    def resize(payload):            # or resize(payload, job)
        '''Resize one image.'''     # the type's description
        return {"width": 200}       # the ack's result; an exception nacks
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from contract.jobtypes import InvalidPayloadError, JobSpec
from contract.limits import MAX_TYPE_DESCRIPTION, TYPE_NAME_MESSAGE, TYPE_NAME_RE
from workers import jobtypes

log = logging.getLogger(__name__)

DEFAULT_LOG_FILE = "jobs.log"

F = TypeVar("F", bound=Callable[..., Any])
# What the worker calls per task: the handler (or the log file), given the job.
Run = Callable[[Mapping[str, Any]], Any]

_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


class HandlerDeclarationError(ValueError):
    """A handler that cannot be declared: a bad name, schema or signature, or a name taken (by
    another handler, or by a built-in type)."""


class PlainError(Exception):
    """A failure whose message is the whole error the nack carries: no exception type, no
    traceback (those are added to any other exception's message, workers.outcomes)."""


class UnknownJobTypeError(PlainError, LookupError):
    """The task's type has no handler on this worker."""


class TaskFailedError(PlainError):
    """The task asked to fail (its payload holds "fail": true)."""


class Handler:
    """A declared handler: its type's name, the function, how the payload is checked first.

    Called with the job (workers.job.Job, a mapping of the delivered task), it checks the
    payload (a built-in type with its contract, filling defaults; yours with its JSON Schema,
    as sent) and returns what the function returns; InvalidPayloadError when refused.
    """

    __slots__ = ("_check", "builtin", "description", "function", "name", "schema", "with_job")

    def __init__(self, name: str, function: Callable[..., Any], schema: Any = None) -> None:
        """schema: a JSON Schema (draft 2020-12), None for any payload, or the built-in type's
        contract (a contract.jobtypes.JobSpec). Raises HandlerDeclarationError."""
        if not isinstance(name, str) or not TYPE_NAME_RE.fullmatch(name):
            raise HandlerDeclarationError(f"{_where(function)}: job type name {name!r}: "
                                          f"{TYPE_NAME_MESSAGE}")  # fmt: skip
        self.name, self.function = name, function
        self.builtin = getattr(function, "__module__", "") == f"{jobtypes.__name__}.{name}"
        self.with_job = _takes_job(function)
        self.schema: Any = None
        self._check: Callable[[Any], Any] | None = None
        if isinstance(schema, JobSpec):
            if schema.name != name:
                raise HandlerDeclarationError(f"{self.where}: its contract is {schema.name!r}")
            self._check, self.description = schema.check, schema.description
            return
        self.description = _first_line(function)
        if schema is not None:
            self.schema, self._check = schema, _schema_check(self, schema)

    @property
    def where(self) -> str:
        """module.function: where it was declared."""
        return _where(self.function)

    def __call__(self, job: Mapping[str, Any]) -> Any:
        """Run one delivered task: the worker's call."""
        return self.run(job["payload"], job)

    def run(self, payload: Any, job: Any = None) -> Any:
        """Check the payload, then call the function with it (and the job, if it takes one: a
        bare workers.job.Job reporting nowhere when none is given)."""
        data = payload if self._check is None else self._check(payload)
        if not self.with_job:
            return self.function(data)
        if job is None:
            from workers.job import Job

            job = Job.bare(payload)
        return self.function(data, job)

    def __repr__(self) -> str:
        return f"<Handler {self.name} {self.where}>"


def _where(function: Any) -> str:
    module = getattr(function, "__module__", None) or "?"
    return f"{module}.{getattr(function, '__qualname__', type(function).__name__)}"


def _first_line(function: Any) -> str:
    lines = (inspect.getdoc(function) or "").strip().splitlines()
    return lines[0].strip()[:MAX_TYPE_DESCRIPTION] if lines else ""


def _takes_job(function: Callable[..., Any]) -> bool:
    """Whether function is of (payload, job); HandlerDeclarationError unless of (payload)."""
    try:
        params = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError) as exc:
        raise HandlerDeclarationError(f"{_where(function)} is not a function: {exc}") from None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    needed = [p for p in positional if p.default is p.empty]
    keywords = [p for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    spread = any(p.kind is p.VAR_POSITIONAL for p in params)
    if len(needed) > 2 or keywords or not (positional or spread):
        raise HandlerDeclarationError(
            f"{_where(function)}: a handler takes (payload) or (payload, job)"
        )
    return len(positional) >= 2 or spread


def _schema_check(handler: Handler, schema: Any) -> Callable[[Any], Any]:
    from contract.payloads import PayloadCheck, schema_problems

    try:
        json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise HandlerDeclarationError(f"{handler.where}: its schema is not JSON: {exc}") from None
    problems = schema_problems(schema)
    if problems:
        raise HandlerDeclarationError(f"{handler.where}: its schema: {problems[0]}")
    check = PayloadCheck(schema)

    def checked(payload: Any) -> Any:
        problems = check.problems(payload)
        if problems:
            raise InvalidPayloadError(handler.name, problems)
        return payload

    return checked


# -- the handlers of this process -----------------------------------------------------------------


class Registry(dict[str, Handler]):
    """name → Handler for every handler declared in this process. A lookup that misses imports
    the built-in types' modules first (once), so a worker made without runworker finds them."""

    def __missing__(self, name: str) -> Handler:
        load_builtins()
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        raise KeyError(name)


REGISTRY = Registry()
_lock = threading.RLock()
_builtins_failed: dict[str, str] | None = None  # built-in type name → why it did not import
_loading = False


def handler(name: str, schema: Any = None) -> Callable[[F], F]:
    """Declare `function` the handler of job type `name` (returned unchanged).

    `schema`: a JSON Schema (draft 2020-12) the payload must match before the function runs,
    registered with the broker at runworker's start; None for any payload. Raises
    HandlerDeclarationError for a bad name or schema, a function of neither (payload) nor
    (payload, job), a name another handler has, or a built-in type's name.
    """
    if callable(name) and not isinstance(name, str):
        raise HandlerDeclarationError(
            f'{_where(name)}: @handler needs the job type\'s name: @handler("my_type")'
        )

    def declare(function: F) -> F:
        add(Handler(name, function, schema))
        return function

    return declare


def add(item: Handler) -> Handler:
    """Put a handler in REGISTRY; HandlerDeclarationError when its name is taken."""
    with _lock:
        if item.name in jobtypes.NAMES and not item.builtin:
            raise HandlerDeclarationError(
                f"{item.where}: {item.name!r} is a built-in job type's name; choose another"
            )
        current = dict.get(REGISTRY, item.name)
        if current is not None and current.where != item.where:
            raise HandlerDeclarationError(
                f"two handlers for job type {item.name!r}: {current.where} and {item.where}"
            )
        dict.__setitem__(REGISTRY, item.name, item)
    return item


def load_builtins() -> dict[str, str]:
    """Import each built-in type's module, once: {name: why} for those that did not import
    (a missing library), whose tasks this worker then nacks saying so; the others run."""
    global _builtins_failed, _loading
    with _lock:
        if _builtins_failed is None and not _loading:
            _loading, failed = True, {}
            try:
                for name in jobtypes.NAMES:
                    try:
                        importlib.import_module(f"{jobtypes.__name__}.{name}")
                    except Exception as exc:
                        failed[name] = f"{type(exc).__name__}: {exc}"
                        log.warning("built-in job type %s unavailable: %s", name, failed[name])
            finally:
                _loading = False
            _builtins_failed = failed
        return dict(_builtins_failed or {})


def yours() -> list[Handler]:
    """The handlers declared in this process that are not built in, by name."""
    return sorted((h for h in REGISTRY.values() if not h.builtin), key=lambda h: h.name)


# -- finding a task's handler ---------------------------------------------------------------------


def no_handler(name: Any) -> str:
    """The nack's error for a task of a type this worker has no handler for."""
    why = (_builtins_failed or {}).get(name) if isinstance(name, str) else None
    failed = f": its module failed to import ({why})" if why else ""
    return f"no handler for job type {name!r} on this worker{failed}"


class Dispatch:
    """resolve(task) for the runner: the log-file handler for an untyped task, else its type's
    handler from REGISTRY (one dict lookup); UnknownJobTypeError when there is none."""

    def __init__(self, log_file: str | os.PathLike[str] = DEFAULT_LOG_FILE) -> None:
        """log_file: where untyped tasks are appended."""
        self.log_file = LogFileHandler(log_file)
        self._handlers = REGISTRY

    def __call__(self, task: Mapping[str, Any]) -> Run:
        name = task.get("type")
        if name is None:
            return self.log_file
        try:
            return self._handlers[name]
        except (KeyError, TypeError):  # TypeError: a type that is not even a string
            raise UnknownJobTypeError(no_handler(name)) from None


class LogFileHandler:
    """Appends each task to a file as one JSON line {"id": ..., "payload": ...}.

    Lines stay whole with many threads and processes appending: O_APPEND makes the kernel
    seek to the end and write in one step, and the whole line goes in one os.write.
    """

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_LOG_FILE) -> None:
        """path is created on first write if missing."""
        self.path = os.fspath(path)

    def __call__(self, task: Mapping[str, Any]) -> None:
        """Append the task; raises TaskFailedError if its payload is an object with "fail": true."""
        payload = task["payload"]
        if isinstance(payload, dict) and payload.get("fail") is True:
            raise TaskFailedError("payload asked to fail")
        # ensure_ascii: a lone surrogate in the payload still encodes, and \u0000 stays escaped.
        line = json.dumps({"id": task["id"], "payload": payload}) + "\n"
        append_line(self.path, line.encode("ascii"))


def append_line(path: str, data: bytes) -> None:
    """Append data with one O_APPEND write; raises OSError if the kernel wrote only part."""
    # Opened per call: cheap next to the HTTP round trips, and a rotated log is followed.
    fd = os.open(path, _OPEN_FLAGS, 0o644)
    try:
        written = os.write(fd, data)
    finally:
        os.close(fd)
    if written != len(data):
        raise OSError(f"short write to {path}: {written} of {len(data)} bytes")

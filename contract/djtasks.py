"""django.tasks on the broker, the part both sides need: the allow-list and the error text format.

The broker's backend (broker/tasks_backend.py) enqueues a "django_task" job and reads results
back; the worker's handler (workers/jobtypes/django_task.py) imports and runs the function. Both
ask `is_allowed` before importing a path a payload names, and meet in a failed attempt's error
text: the exception's class path on the first line, then its traceback.
"""

from __future__ import annotations

import fnmatch
import traceback

from django.conf import settings

from contract.conf import broker_settings

JOB_TYPE = "django_task"
# The backend's dotted path, as projects write it in TASKS (settings hold it as text).
BACKEND_PATH = "broker.tasks_backend.BrokerBackend"
# A nack's error is the traceback; keep its end (the raise site) within a modest request body.
MAX_TRACEBACK_CHARS = 32_000


class TaskNotAllowedError(Exception):
    """The task's path is not in this worker's allow-list, or is not a @task function."""


# Results have always named it where django.tasks users import it from, the backend's module
# (which re-exports this very class): stored errors keep resolving to it.
_PUBLIC_PATHS: dict[type[BaseException], str] = {
    TaskNotAllowedError: "broker.tasks_backend.TaskNotAllowedError"
}


def allowed_patterns() -> list[str]:
    """BROKER_TASKS_ALLOWED if set, else every BrokerBackend's OPTIONS["ALLOWED_TASKS"]."""
    explicit = list(broker_settings.BROKER_TASKS_ALLOWED or [])
    if explicit:
        return explicit
    patterns: list[str] = []
    for params in (getattr(settings, "TASKS", None) or {}).values():
        if params.get("BACKEND") == BACKEND_PATH:
            patterns.extend(params.get("OPTIONS", {}).get("ALLOWED_TASKS", []))
    return patterns


def is_allowed(path: str) -> bool:
    """Whether `path` matches an allow-list pattern (fnmatch: "myapp.tasks.*", or exact)."""
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in allowed_patterns())


def class_path(kind: type[BaseException]) -> str:
    """The dotted path results name an exception class by (and import it from)."""
    return _PUBLIC_PATHS.get(kind) or f"{kind.__module__}.{kind.__qualname__}"


def error_text(exc: BaseException) -> str:
    """A failed attempt's error: the exception's class path on one line, then its traceback."""
    text = "".join(traceback.format_exception(exc))
    if len(text) > MAX_TRACEBACK_CHARS:
        text = "...\n" + text[-MAX_TRACEBACK_CHARS:]
    return f"{class_path(type(exc))}\n{text}"


def split_error(text: str) -> tuple[str, str] | None:
    """error_text's (class path, traceback); None for an error the worker did not write so."""
    head, _, rest = text.partition("\n")
    if _is_class_path(head) and rest:
        return head, rest
    return None


def _is_class_path(text: str) -> bool:
    """`module.path.Name`: words (letters, digits, _) joined by dots, each part starting with an
    ASCII letter or _ but the inner ones. Read once through (an error's first line is a
    worker's, of any length), no regular expression's backtracking."""
    module, dot, name = text.rpartition(".")
    return (
        bool(dot)
        and _starts_a_name(module)
        and _starts_a_name(name)
        and all(c.isalnum() or c in "._" for c in module)
        and all(c.isalnum() or c == "_" for c in name)
    )


def _starts_a_name(text: str) -> bool:
    return text[:1].isascii() and (text[:1].isalpha() or text[:1] == "_")

"""Handler dispatch: untyped tasks go to the log file, typed ones to workers.jobtypes.REGISTRY."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from workers import jobtypes

DEFAULT_LOG_FILE = "jobs.log"

Handler = Callable[[Mapping[str, Any]], Any]

_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


class TaskFailedError(Exception):
    """The task asked to fail (its payload holds "fail": true)."""


class UnknownJobTypeError(LookupError):
    """The task names a type that no one registered."""


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


def resolve(task: Mapping[str, Any], *, log_file: str = DEFAULT_LOG_FILE) -> Handler:
    """The handler for task: the log-file one when its type is None, else the registered type's.

    Raises UnknownJobTypeError ("unknown job type: X") when the type is not registered.
    """
    name = task.get("type")
    if name is None:
        return LogFileHandler(log_file)
    try:
        jobtype = jobtypes.REGISTRY[name]
    except (KeyError, TypeError):  # TypeError: a type that is not even a string
        raise UnknownJobTypeError(f"unknown job type: {name}") from None
    if getattr(jobtype, "with_job", False):
        # A resumable type's run(payload, job): it reports and reads its checkpoint.
        with_job: Any = jobtype
        return lambda job: with_job.handler(job["payload"], job)
    return lambda t: jobtype.handler(t["payload"])

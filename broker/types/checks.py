"""A payload against its job type's schema at enqueue: every way in (broker/validation.py) asks
here for the types that are not built in.

The type is read from the database at each enqueue, so a PUT answered on one broker process
counts on every other at once; what is kept per process is only the compiled schema, keyed by
the row's id and updated_at (which every change moves forward), so a kept one is never stale.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from broker.models import JobType
from contract import limits
from contract.payloads import PayloadCheck

MAX_KEPT = 256  # compiled schemas kept per process, the least recently used dropped first

_kept: OrderedDict[tuple[int, datetime], PayloadCheck | None] = OrderedDict()
_lock = threading.Lock()


def _compiled(key: tuple[int, datetime], schema: str | None) -> PayloadCheck | None:
    """The row's schema compiled (None: any payload), kept for the next enqueue of it."""
    with _lock:
        if key in _kept:
            _kept.move_to_end(key)
            return _kept[key]
    check = None if schema is None else PayloadCheck(json.loads(schema))
    with _lock:
        _kept[key] = check
        while len(_kept) > MAX_KEPT:
            _kept.popitem(last=False)
    return check


class TypeBook:
    """The job types of one enqueue call (a batch, a workflow): each distinct name is read once."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[bool, PayloadCheck | None]] = {}

    def find(self, name: str) -> tuple[bool, PayloadCheck | None]:
        """(whether the type exists, its compiled schema: None for any payload)."""
        if name not in self._seen:
            row = None
            if limits.TYPE_NAME_RE.fullmatch(name):  # no query for a name no type can have
                rows = JobType.objects.filter(name=name)
                row = rows.values_list("id", "updated_at", "schema").first()
            self._seen[name] = (False, None) if row is None else (
                True, _compiled((row[0], row[1]), row[2])
            )  # fmt: skip
        return self._seen[name]

    def problems(self, name: str, payload: Callable[[], Any] | None) -> dict[str, list[str]]:
        """{"type": [...]} for an unknown type, else the payload's problems named `payload`,
        `payload.width`, `payload.items.2`; payload None: not looked at (it failed already)."""
        exists, check = self.find(name)
        if not exists:
            return {"type": [f"Unknown job type {name!r}."]}
        if check is None or payload is None:
            return {}
        return {
            f"payload.{place}" if place else "payload": messages
            for place, messages in check.problems(payload()).items()
        }

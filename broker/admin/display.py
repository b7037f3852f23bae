"""How admin shows values: times, JSON, empties."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from broker.models import Task

EMPTY = "-"  # what Django's admin shows for an empty value

# -- showing values ------------------------------------------------------------------------------


def when(value: datetime | None, timespec: str = "milliseconds") -> str:
    """2026-11-29 11:46:13.631 (UTC): sortable, exact, and short enough for a list column."""
    if value is None:
        return EMPTY
    return timezone.localtime(value).replace(tzinfo=None).isoformat(sep=" ", timespec=timespec)


def time_field(field: str, label: str) -> Callable[[Any, Task], str]:
    @admin.display(description=label)
    def show(model_admin: Any, task: Task) -> str:
        return when(getattr(task, field))

    return show


def pretty_json(text: str | None) -> str:
    if text is None:
        return EMPTY
    try:
        shown = json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=False)
    except ValueError:
        shown = text
    return format_html('<pre class="broker-json">{}</pre>', shown)


# -- the task list --------------------------------------------------------------------------------


class ReadOnly:
    """A model admin with no add, delete or object form that saves: its rows move only through
    broker.queue. The change permission still allows list-level actions (obj None)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request)  # type: ignore[misc]

"""How far a running task got, drawn for people: a progress bar (admin lists and task pages,
the dashboard's running tasks read the same numbers from data.json)."""

from __future__ import annotations

from django.utils.html import format_html
from django.utils.safestring import SafeString

from broker.admin.display import EMPTY
from broker.models import Task
from broker.states import State


def bar(fraction: float | None, message: str | None) -> SafeString:
    """A <progress> bar with its percentage and message; without a fraction, an indeterminate
    bar (the task reported a message only)."""
    label = f"{fraction:.0%}" if fraction is not None else ""
    text = " ".join(part for part in (label, message or "") if part)
    if fraction is None:
        element = format_html('<progress class="broker-progress" title="{}"></progress>', text)
    else:
        element = format_html(
            '<progress class="broker-progress" max="1" value="{}" title="{}">{}</progress>',
            f"{min(max(fraction, 0.0), 1.0):.4f}",
            text,
            label,
        )
    return format_html('{} <span class="broker-progress-text">{}</span>', element, text)


def in_list(task: Task) -> str:
    """A handed-out task's bar (its last report), else nothing: the list's progress column."""
    if task.state != State.HANDED_OUT or task.progress_at is None:
        return ""
    return bar(task.progress_fraction, task.progress_message)


def on_page(task: Task, when: str) -> str:
    """The task page's progress: a bar while handed out; once finished, the last report as
    text (a done task keeps it); `when` is the report's time as the page shows times."""
    if task.progress_at is None:
        return EMPTY
    if task.state == State.HANDED_OUT:
        return format_html("{} <small>reported {}</small>", bar(
            task.progress_fraction, task.progress_message), when)  # fmt: skip
    fraction = task.progress_fraction
    parts = [f"{fraction:.0%}" if fraction is not None else "", task.progress_message or ""]
    return format_html(
        "{} <small>(last report, {})</small>", " ".join(p for p in parts if p) or EMPTY, when
    )

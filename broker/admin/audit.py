"""Admin's own log (LogEntry) records every admin action on the broker's objects, with the user:
Django logs adds, edits and deletions itself; `install` makes every action of the broker's
admin pages (requeue, discard, cancel, pause, resume, revoke) log a change per object it was
given, in one statement, so no page has to remember to."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import Model, QuerySet
from django.http import HttpRequest

# Objects logged one by one per action at most; past it one more entry says how many in all.
MAX_LOGGED = 1000
Action = Callable[[Any, HttpRequest, QuerySet], Any]


def log(request: HttpRequest, model: type[Model], pks: list[Any], message: str) -> None:
    """A change entry, by the request's user, for each of `pks` (at most MAX_LOGGED)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not pks:
        return
    rows = model._base_manager.filter(pk__in=pks[:MAX_LOGGED])
    LogEntry.objects.log_actions(user.pk, rows, CHANGE, message)
    if len(pks) > MAX_LOGGED:
        LogEntry.objects.log_actions(
            user.pk, rows[:1], CHANGE, f"{message} ({len(pks)} objects in all)"
        )


def _audited(func: Action, description: str) -> Action:
    def run(modeladmin: Any, request: HttpRequest, queryset: QuerySet) -> Any:
        # Chosen before the action moves them (a requeued task leaves the DLQ's list).
        chosen = list(queryset.values_list("pk", flat=True)[: MAX_LOGGED + 1])
        answer = func(modeladmin, request, queryset)
        log(request, modeladmin.model, chosen, f"{description}.")
        return answer

    return run


def install(site: admin.AdminSite, app_label: str = "broker") -> None:
    """Wrap every action of `app_label`'s ModelAdmins on `site` (not Django's delete_selected,
    which logs itself; not an action marked `logs_itself`)."""
    for model, model_admin in site._registry.items():
        if model._meta.app_label != app_label:
            continue
        get_actions = model_admin.get_actions

        def wrapped(request: HttpRequest, _get: Any = get_actions) -> dict[str, Any]:
            actions = _get(request)
            return {
                name: (
                    (func, name, description)
                    if name == "delete_selected" or getattr(func, "logs_itself", False)
                    else (_audited(func, str(description)), name, description)
                )
                for name, (func, _, description) in actions.items()
            }

        model_admin.get_actions = wrapped

"""Admin for queue settings and schedules: every change goes through broker.queues and
broker.schedules, the functions the API calls, never a field written here."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import ngettext

from broker import queue, queues, schedules
from broker.admin.display import EMPTY, when
from broker.models import Queue, Schedule

SETTINGS = queues.FIELDS  # paused, max_in_flight, rate_per_s, fair, key_max_in_flight, ordered


class QueueForm(forms.ModelForm):
    """The settings, checked by the rules PATCH /queues/{name} applies."""

    class Meta:
        model = Queue
        fields = ("name", *SETTINGS)
        # The promises of API.md's Keys section, where the setting is changed.
        help_texts = {
            "fair": "Claims share the queue among keys: the next task is the oldest of the key "
            "served longest ago. Tasks without a key form one key of their own.",
            "key_max_in_flight": "At most this many tasks of one key handed out at once "
            "(empty: no cap). Tasks without a key are not limited.",
            "ordered": "Per key, one task at a time, in enqueue order. Turned off, the tasks "
            "waiting for their key's turn become claimable at once.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("max_in_flight", "key_max_in_flight"):  # the browser's bound, as the API's
            if name in self.fields:
                self.fields[name].widget.attrs["min"] = 1

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        name = data.get("name")
        if self.instance._state.adding and isinstance(name, str):  # named as the API names them
            for messages in queues.name_problems(name).values():
                self.add_error("name", messages)
        changes = {k: data.get(k) for k in SETTINGS if k in data}
        for field, messages in queues.problems(changes).items():
            self.add_error(field if field in self.fields else None, messages)
        return data


def _gauge_column(name: str, description: str) -> Callable[[QueueAdmin, Queue], int]:
    """A list column showing one of the queue's gauges, as /stats counts it."""

    @admin.display(description=description)
    def column(self: QueueAdmin, obj: Queue) -> int:
        return self._gauge(name, obj)

    return column


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    """Every queue a task or a setting named; pause, resume, limits and the key settings change
    through broker.queues.update, so the claimers parked on a queue hear of it (and turning
    `ordered` off lets the tasks waiting for their key's turn go)."""

    form = QueueForm
    list_display = ("name", *SETTINGS, *queues.GAUGES)
    list_editable = ("max_in_flight", "rate_per_s", "key_max_in_flight")
    list_filter = ("paused", "fair", "ordered")
    search_fields = ("name",)
    actions = ("pause_selected", "resume_selected")
    _gauges: dict[str, dict[str, int]] | None = None

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # settings are cleared with null limits, never a deleted row

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return ("name",) if obj is not None else ()

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        queues.ensure_every_row()  # queues named only by tasks get a (plain) row
        return super().changelist_view(request, extra_context)

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        # One read of the counter rows for the page's queues, not for every queue.
        self._gauges = queue.queue_gauges([row.name for row in changelist.result_list])
        return changelist

    def get_changelist_form(self, request: HttpRequest, **kwargs: Any) -> Any:
        # The list's editable limits are checked as the change page checks them (QueueForm).
        return super().get_changelist_form(request, form=QueueForm, **kwargs)

    def save_model(self, request: HttpRequest, obj: Queue, form: Any, change: bool) -> None:
        changed = SETTINGS if not change else [f for f in form.changed_data if f in SETTINGS]
        queues.update(obj.name, {f: form.cleaned_data[f] for f in changed})

    @admin.action(description="Pause selected queues", permissions=["change"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._report(request, queues.update_many(_names(queryset), {"paused": True}), "paused")

    @admin.action(description="Resume selected queues", permissions=["change"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._report(request, queues.update_many(_names(queryset), {"paused": False}), "resumed")

    def _report(self, request: HttpRequest, n: int, what: str) -> None:
        self.message_user(request, ngettext("%d queue %s.", "%d queues %s.", n) % (n, what))

    def _gauge(self, name: str, obj: Queue) -> int:
        gauges = (self._gauges or {}).get(obj.name)
        if gauges is None:  # not this page's (another request's list replaced it)
            gauges = queue.queue_gauges([obj.name])[obj.name]
        return gauges[name]

    ready = _gauge_column("ready", "ready")
    handed_out = _gauge_column("handed_out", "handed out")
    delayed = _gauge_column("delayed", "delayed")
    dead = _gauge_column("dead", "dead")
    blocked = _gauge_column("blocked", "blocked")


def _names(queryset: QuerySet) -> list[str]:
    return [str(pk) for pk in queryset.values_list("pk", flat=True)]


class ScheduleForm(forms.ModelForm):
    """A schedule, checked by the rules POST and PATCH /schedules apply (the job as POST /jobs)."""

    job = forms.CharField(widget=forms.Textarea(attrs={"rows": 6, "cols": 80}),
                          help_text="The body of a POST /jobs, as JSON.")  # fmt: skip

    class Meta:
        model = Schedule
        fields = ("name", "cron", "timezone", "every_s", "job", "paused")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        try:
            job = json.loads(data.get("job") or "")
        except (ValueError, RecursionError):  # RecursionError: nested past the parser's stack
            self.add_error("job", "Not JSON.")
            return data
        body = {k: data.get(k) or None for k in ("cron", "timezone", "every_s")}
        body.update(job=job, paused=bool(data.get("paused")))
        current = self.instance if self.instance._state.adding is False else None
        if current is None:
            body["name"] = data.get("name")
        try:
            self.checked_body = body
            schedules.checked(body, current)
            if current is None and (over := schedules.over_the_cap()):
                raise schedules.ScheduleError(over)
        except schedules.ScheduleError as exc:
            for field, messages in exc.fields.items():
                name = field.split(".", 1)[0]
                shown = [f"{field}: {m}" if field != name else m for m in messages]
                self.add_error(name if name in self.fields else None, shown)
        return data


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    """Schedules: listed with their next and last runs; pause, resume and edits go through
    broker.schedules, which recomputes next_run_at as the API does."""

    form = ScheduleForm
    list_display = ("name", "timing", "paused", "next_run", "last_run", "last_task")
    list_filter = ("paused",)
    search_fields = ("name",)
    actions = ("pause_selected", "resume_selected")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return ("name",) if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        body = form.checked_body
        saved = schedules.update(obj.name, body) if change else schedules.create(body)
        obj.pk, obj.next_run_at = saved.pk, saved.next_run_at

    @admin.display(description="timing")
    def timing(self, obj: Schedule) -> str:
        return f"every {obj.every_s} s" if obj.every_s else f"{obj.cron} ({obj.timezone})"

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, obj: Schedule) -> str:
        return when(obj.next_run_at, timespec="seconds")

    @admin.display(description="last run", ordering="last_run_at")
    def last_run(self, obj: Schedule) -> str:
        return when(obj.last_run_at, timespec="seconds")

    @admin.display(description="last task")
    def last_task(self, obj: Schedule) -> str:
        if obj.last_task_id is None:
            return EMPTY
        url = reverse("admin:broker_task_change", args=[obj.last_task_id])
        return format_html('<a href="{}">#{}</a>', url, obj.last_task_id)

    @admin.action(description="Pause selected schedules", permissions=["change"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        n = schedules.set_paused(_names(queryset), True)
        self.message_user(request, ngettext("%d schedule paused.", "%d schedules paused.", n) % n)

    @admin.action(description="Resume selected schedules", permissions=["change"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        n = schedules.set_paused(_names(queryset), False)
        self.message_user(request, ngettext("%d schedule resumed.", "%d schedules resumed.", n) % n)

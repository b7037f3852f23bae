"""Admin: read-only tasks, the dead-letter queue, and actions that go through broker.queue."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.views.main import PAGE_VAR
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.db.models.functions import Length, Substr
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator
from django.utils.translation import ngettext

from broker import queue, waiting
from broker.admin_lists import EstimatedCountPaginator, QueueFilter, TaskChangeList, TypeFilter
from broker.exceptions import TaskNotFound
from broker.models import DeadTask, Task
from broker.states import GAUGE_STATES, PRIORITY_NAMES, State

ERROR_PREVIEW_CHARS = 80
# A task's page shows the newest errors of its history, each cut (the history may hold hundreds
# of 256 KiB tracebacks after requeues): the same bound as GET /jobs/{id}.
ERRORS_SHOWN = 100
ERROR_CHARS_SHOWN = 16_384
EMPTY = "-"  # what Django's admin shows for an empty value
REQUEUE_CHUNK = 1000


# -- showing values ------------------------------------------------------------------------------


def when(value: datetime | None, timespec: str = "milliseconds") -> str:
    """2026-11-29 11:46:13.631 (UTC): sortable, exact, and short enough for a list column."""
    if value is None:
        return EMPTY
    return timezone.localtime(value).replace(tzinfo=None).isoformat(sep=" ", timespec=timespec)


def _time_field(field: str, label: str) -> Callable[[Any, Task], str]:
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


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    """Every task, read-only; "Cancel selected" goes through broker.queue."""

    # Sequences, as Django takes them: DeadTaskAdmin's differ in length and content.
    list_display: Sequence[str] = (
        "short_id", "state", "queue", "type", "priority_name", "attempts_of_max",
        "error_preview", "updated",
    )  # fmt: skip
    list_display_links = ("short_id",)
    list_filter: Sequence[str | type[admin.SimpleListFilter]] = (
        "state", QueueFilter, TypeFilter, "priority",
    )  # fmt: skip
    search_fields = ("queue", "type", "idempotency_key", "last_error", "payload")
    search_help_text = (
        "#42 finds task 42. Other words find tasks whose queue, job type or idempotency key is "
        "exactly that, or whose last error or payload contains it (a number: that task id too)."
    )
    date_hierarchy = "created_at"
    ordering: Sequence[str] = ("-id",)
    # Only orders an index serves: sorting a million rows by queue would read them all.
    sortable_by: Sequence[str] = ("short_id",)
    list_per_page = 50
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # facet counts are one COUNT per filter choice
    actions: Sequence[str] = ("cancel_selected",)
    list_title = "Tasks"
    queue_choices_from: tuple[tuple[str, ...], bool] = (tuple(GAUGE_STATES), True)
    fieldsets = (
        (None, {"fields": (
            "id", "state", "waiting_now", "queue", "type", "priority_name", "attempts_of_max",
            "idempotency_key", "last_error",
        )}),
        ("Times and lease", {"fields": (
            "created", "available", "last_update", "claimed", "lease_until", "worker",
            "lease_id",
        )}),
        ("Payload and result", {"fields": ("payload_pretty", "result_pretty")}),
        ("Errors, every attempt", {"fields": ("error_history_pretty",)}),
    )  # fmt: skip

    # Read-only: state, attempts and the lease move only through broker.queue.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The change permission allows the actions (list level, obj None); no object's form saves.
        return obj is None and super().has_change_permission(request)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f for _, opts in self.fieldsets for f in opts["fields"]]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return super().changelist_view(request, {"title": self.list_title, **(extra_context or {})})

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[TaskChangeList]:
        return TaskChangeList

    @admin.display(description="id", ordering="id")
    def short_id(self, task: Task) -> str:
        return f"#{task.pk}"

    @admin.display(description="priority", ordering="priority")
    def priority_name(self, task: Task) -> str:
        return PRIORITY_NAMES.get(task.priority, str(task.priority))

    @admin.display(description="attempts")
    def attempts_of_max(self, task: Task) -> str:
        # No max: an SQS message without a RedrivePolicy is received any number of times.
        return f"{task.attempts}/{'∞' if task.max_attempts is None else task.max_attempts}"

    @admin.display(description="last error")
    def error_preview(self, task: Task) -> str:
        lines = [line.strip() for line in (task.last_error or "").splitlines() if line.strip()]
        if not lines:
            return ""
        # A Python traceback says what went wrong on its last line, not its first.
        telling = lines[-1] if lines[0].startswith("Traceback") else lines[0]
        return Truncator(telling).chars(ERROR_PREVIEW_CHARS)

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, task: Task) -> str:
        return when(task.updated_at, timespec="seconds")

    # The page shows times to the millisecond: in a queue, seconds apart is a long time.
    created = _time_field("created_at", "created")
    available = _time_field("available_at", "available at")
    last_update = _time_field("updated_at", "updated")
    claimed = _time_field("claimed_at", "claimed at")
    lease_until = _time_field("lease_deadline", "lease deadline")

    @admin.display(description="waiting")
    def waiting_now(self, task: Task) -> str:
        """Why it is not running: the same explanation as GET /jobs/{id}'s `waiting`."""
        shown = waiting.explain(task.pk) if task.state in (State.READY, State.DELAYED) else None
        if shown is None:
            return EMPTY
        extra = shown.get("until") or (f"{shown['ahead']} ahead" if "ahead" in shown else "")
        return format_html(
            '<b class="broker-waiting">{}</b> {}{}', shown["reason"], shown["detail"],
            f" ({extra})" if extra and extra not in shown["detail"] else "",
        )  # fmt: skip

    @admin.display(description="payload")
    def payload_pretty(self, task: Task) -> str:
        return pretty_json(task.payload)

    @admin.display(description="result")
    def result_pretty(self, task: Task) -> str:
        return pretty_json(task.result)

    @admin.display(description="errors")
    def error_history_pretty(self, task: Task) -> str:
        newest = (
            task.error_history.order_by("-id")
            .annotate(head=Substr("error", 1, ERROR_CHARS_SHOWN), length=Length("error"))
            .values_list("attempt", "at", "head", "length")[:ERRORS_SHOWN]
        )
        rows = list(newest)[::-1]
        if not rows:
            return EMPTY
        in_all = task.error_history.count() if len(rows) == ERRORS_SHOWN else len(rows)
        more = f"The newest {len(rows)} of {in_all} errors." if in_all > len(rows) else ""
        cells = [
            (attempt, when(at), head, f"\n[cut: {length} characters in all]" if length > len(head)
             else "")
            for attempt, at, head, length in rows
        ]  # fmt: skip
        return format_html(
            '{}<table class="broker-errors"><thead><tr><th>attempt</th><th>at</th><th>error</th>'
            "</tr></thead><tbody>{}</tbody></table>",
            format_html("<p>{}</p>", more) if more else "",
            format_html_join(
                "",
                '<tr><td>{}</td><td>{}</td><td><pre class="broker-json">{}{}</pre></td></tr>',
                cells,
            ),
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        digits = term.removeprefix("#")
        is_id = digits.isdigit() and len(digits) < 19
        if is_id and term.startswith("#"):
            return queryset.filter(pk=int(digits)), False
        # Names match exactly: an equality the indexes (and a LIMIT walk) serve, where
        # "contains" on a queue would scan every row whatever the list's other filters.
        match = (
            Q(queue=term)
            | Q(type=term)
            | Q(idempotency_key=term)
            | Q(last_error__icontains=term)
            | Q(payload__icontains=term)
        )
        return queryset.filter(match | Q(pk=int(digits)) if is_id else match), False

    @admin.action(description="Cancel selected", permissions=["change"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        moved = queue.cancel_many(queryset.values_list("pk", flat=True))
        self.message_user(
            request, ngettext("%d task cancelled.", "%d tasks cancelled.", moved) % moved
        )

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": ("broker/admin.css",)}


# -- the dead-letter queue ------------------------------------------------------------------------


def requeue_matching(queryset: QuerySet) -> int:
    """Requeue every dead task in `queryset`, 1000 ids at a time by primary key; returns the count.

    Reads ids only (no model instances), and walks by id so a requeued chunk, which no longer
    matches, never shifts the next chunk.
    """
    return sum(queue.requeue_many(chunk) for chunk in _id_chunks(queryset))


def _id_chunks(queryset: QuerySet) -> Iterator[list[int]]:
    ids, last = queryset.order_by("pk").values_list("pk", flat=True), 0
    while chunk := list(ids.filter(pk__gt=last)[:REQUEUE_CHUNK]):
        yield chunk
        last = chunk[-1]


@admin.register(DeadTask)
class DeadTaskAdmin(TaskAdmin):
    """The DLQ: dead tasks only, newest death first, with the requeue actions."""

    list_display = (
        "short_id", "queue", "type", "priority_name", "attempts_of_max", "error_preview",
        "died_at",
    )  # fmt: skip
    list_filter = (QueueFilter, TypeFilter, "priority")
    date_hierarchy = "updated_at"
    ordering = ("-updated_at",)
    sortable_by = ("short_id", "died_at")
    actions = ("requeue_selected", "requeue_all_matching")
    list_title = "Dead-letter queue"
    queue_choices_from = ((State.DEAD,), False)  # queues that have dead tasks
    change_list_template = "admin/broker/deadtask/change_list.html"
    change_form_template = "admin/broker/deadtask/change_form.html"

    @admin.display(description="died", ordering="updated_at")
    def died_at(self, task: Task) -> str:
        return when(task.updated_at, timespec="seconds")

    def may_requeue(self, request: HttpRequest) -> bool:
        return super().has_change_permission(request)

    @admin.action(description="Requeue selected", permissions=["change"])
    def requeue_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        moved = queue.requeue_many(queryset.values_list("pk", flat=True))
        self._report(request, moved)

    @admin.action(description="Requeue all matching the current filter", permissions=["change"])
    def requeue_all_matching(self, request: HttpRequest, queryset: QuerySet | None = None) -> None:
        # The selection does not matter: the list's filters and search (the query string) do.
        matching = self.get_changelist_instance(request).get_queryset(request)
        self._report(request, requeue_matching(matching))

    def _report(self, request: HttpRequest, moved: int) -> None:
        self.message_user(
            request, ngettext("%d task requeued.", "%d tasks requeued.", moved) % moved
        )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # The same filters, first page: the page we were on may be past the end afterwards.
        params = request.GET.copy()
        params.pop(PAGE_VAR, None)
        here = f"{request.path}?{params.urlencode()}" if params else request.path
        # Django runs an action only on a non-empty selection; this one needs none.
        if (
            request.method == "POST"
            and _posted_action(request) == "requeue_all_matching"
            and "requeue_all_matching" in self.get_actions(request)
        ):
            self.requeue_all_matching(request)
            return HttpResponseRedirect(here)
        extra = {
            "may_requeue": self.may_requeue(request),
            "requeue_all_url": here,
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = {"may_requeue": self.may_requeue(request), **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra)

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        own = [
            path(
                "<path:object_id>/requeue/",
                self.admin_site.admin_view(self.requeue_view),
                name="{}_{}_requeue".format(*info),
            )
        ]
        return own + super().get_urls()

    def requeue_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: the detail page's Requeue button, the same transition as POST /dlq/{id}/requeue."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.may_requeue(request):
            raise PermissionDenied
        changelist = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist")
        try:
            if not (object_id.isdigit() and len(object_id) < 19):  # a bigint, or no task
                raise TaskNotFound
            queue.requeue(int(object_id))
        except TaskNotFound:
            self.message_user(
                request, f"Task #{object_id} is not in the dead-letter queue.", messages.WARNING
            )
            return HttpResponseRedirect(changelist)
        url = reverse("admin:broker_task_change", args=[object_id])
        self.message_user(
            request,
            format_html('Task <a href="{}">#{}</a> requeued: it is ready again.', url, object_id),
        )
        return HttpResponseRedirect(changelist)


def _posted_action(request: HttpRequest) -> str | None:
    """The action whose "Go" was pressed (there is one action bar above and one below)."""
    chosen = request.POST.getlist("action")
    try:
        return chosen[int(request.POST.get("index", 0))]
    except (ValueError, IndexError):
        return None


# Queue settings and schedules: their own module, registered with the rest.
from broker import admin_queues  # noqa: E402, F401

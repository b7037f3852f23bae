"""Admin of tasks: read-only lists and pages, and the moves a person makes through broker.queue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar
from urllib.parse import urlencode

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.db.models.functions import Length, Substr
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator
from django.utils.translation import ngettext

from broker import queue, waiting
from broker.admin import progress as admin_progress
from broker.admin.display import EMPTY, ReadOnly, pretty_json, time_field, when
from broker.admin.lists import (
    EstimatedCountPaginator,
    KeyFilter,
    QueueFilter,
    TaskChangeList,
    TypeFilter,
    UniqueKeyFilter,
)
from broker.models import Task
from broker.queue import dependencies
from broker.states import GAUGE_STATES, PRIORITY_NAMES, State
from broker.workflows.admin import workflow_cell, workflow_link

ERROR_PREVIEW_CHARS = 80
# A task's page shows the newest errors of its history, each cut (the history may hold hundreds
# of 256 KiB tracebacks after requeues): the same bound as GET /jobs/{id}.
ERRORS_SHOWN = 100
ERROR_CHARS_SHOWN = 16_384
KEY_PREVIEW_CHARS = 32
KEY_SEARCH = "key:"  # "key:acme" in the search box: that key's tasks only


@admin.register(Task)
class TaskAdmin(ReadOnly, admin.ModelAdmin):  # state, attempts, lease: broker.queue only
    """Every task, read-only; "Cancel selected" goes through broker.queue."""

    # Sequences, as Django takes them: DeadTaskAdmin's differ in length and content.
    list_display: Sequence[str] = (
        "short_id", "state", "progress_bar", "queue", "key_link", "type", "priority_name",
        "attempts_of_max", "error_preview", "updated",
    )  # fmt: skip
    list_display_links = ("short_id",)
    list_filter: Sequence[str | type[admin.SimpleListFilter]] = (
        "state", QueueFilter, KeyFilter, UniqueKeyFilter, TypeFilter, "priority",
    )  # fmt: skip
    search_fields = ("queue", "type", "idempotency_key", "key", "last_error", "payload")
    search_help_text = (
        "#42 finds task 42, key:acme the tasks whose key is acme. Other words find tasks whose "
        "queue, key, job type or idempotency key is exactly that, or whose last error or payload "
        "contains it (a number: that task id too)."
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
            "id", "state", "waiting_now", "queue", "key", "type", "priority_name",
            "attempts_of_max",
            "idempotency_key", "unique_holding", "last_error_shown", "waits_for",
            "workflow_step",
        )}),
        ("Times and lease", {"fields": (
            "created", "available", "last_update", "claimed", "lease_until", "worker",
            "lease",
        )}),
        ("Progress", {"fields": ("progress_now", "checkpoint_pretty")}),
        ("Payload and result", {"fields": ("payload_pretty", "result_pretty")}),
        ("Errors, every attempt", {"fields": ("error_history_pretty",)}),
    )  # fmt: skip

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

    @admin.display(description="key")
    def key_link(self, task: Task) -> str:
        """The task's key, cut short, linking to the list of that key's tasks."""
        if task.key is None:
            return ""
        url = f"{reverse('admin:broker_task_changelist')}?{urlencode({'key': task.key})}"
        shown = Truncator(task.key).chars(KEY_PREVIEW_CHARS)
        return format_html('<a href="{}" title="{}">{}</a>', url, task.key, shown)

    @admin.display(description="unique key")
    def unique_holding(self, task: Task) -> str:
        """The unique key (linking to its tasks), how many enqueues the task absorbed while
        pending and, for one still pending, when it runs (a debounce pushes that time)."""
        if task.unique_key is None:
            return EMPTY
        query = urlencode({"unique_key": task.unique_key})
        url = f"{reverse('admin:broker_task_changelist')}?{query}"
        pending = task.claimed_at is None and task.state in (State.READY, State.DELAYED)
        runs = (
            format_html(" · runs at {}", when(task.available_at))
            if pending and task.state == State.DELAYED
            else format_html(" · ready since {}", when(task.available_at))
            if pending
            else ""
        )
        absorbed = (
            ngettext("absorbed %d enqueue", "absorbed %d enqueues", task.absorbed) % task.absorbed
        )
        return format_html('<a href="{}">{}</a> · {}{}', url, task.unique_key, absorbed, runs)

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
    created = time_field("created_at", "created")
    available = time_field("available_at", "available at")
    last_update = time_field("updated_at", "updated")
    claimed = time_field("claimed_at", "claimed at")
    lease_until = time_field("lease_deadline", "lease deadline")

    @admin.display(description="after")
    def waits_for(self, task: Task) -> str:
        """The tasks it waits or waited for, each linked, with its state; and the policy."""
        if task.after_policy is None:
            return EMPTY
        parents = dependencies.parents_of([task.pk]).get(task.pk, [])
        items = format_html_join(
            ", ", '<a href="{}">#{}</a> ({})',
            ((reverse("admin:broker_task_change", args=[p.pk]), p.pk, p.state) for p in parents),
        )  # fmt: skip
        return format_html("{} — policy {}", items, task.after_policy)

    @admin.display(description="workflow")
    def workflow_step(self, task: Task) -> str:
        return workflow_link(task)

    @admin.display(description="workflow")
    def workflow_column(self, task: Task) -> str:
        return workflow_cell(task)

    @admin.display(description="lease id")
    def lease(self, task: Task) -> str:
        # A failed attempt leaves its lease id behind for SQS's DeleteMessage (ack_lapsed).
        if task.state == State.HANDED_OUT or not task.lease_id:
            return task.lease_id or EMPTY
        return f"{task.lease_id} (lapsed: its receipt handle still deletes the message)"

    @admin.display(description="waiting")
    def waiting_now(self, task: Task) -> str:
        """Why it is not running: the same explanation as GET /jobs/{id}'s `waiting`."""
        shown = waiting.explain(task.pk) if task.state in waiting.WAITING_STATES else None
        if shown is None:
            return EMPTY
        extra = shown.get("until") or (f"{shown['ahead']} ahead" if "ahead" in shown else "")
        if "behind" in shown:  # key_busy: the earlier task of its key that holds it
            url = reverse("admin:broker_task_change", args=[shown["behind"]])
            extra = format_html('behind <a href="{}">#{}</a>', url, shown["behind"])
        return format_html(
            '<b class="broker-waiting">{}</b> {}{}', shown["reason"], shown["detail"],
            format_html(" ({})", extra) if extra and extra not in shown["detail"] else "",
        )  # fmt: skip

    @admin.display(description="progress")
    def progress_bar(self, task: Task) -> str:
        return admin_progress.in_list(task)

    @admin.display(description="progress")
    def progress_now(self, task: Task) -> str:
        return admin_progress.on_page(task, when(task.progress_at))

    @admin.display(description="checkpoint")
    def checkpoint_pretty(self, task: Task) -> str:
        # What the task's next delivery resumes from.
        return pretty_json(task.checkpoint)

    @admin.display(description="payload")
    def payload_pretty(self, task: Task) -> str:
        return pretty_json(task.payload)

    @admin.display(description="result")
    def result_pretty(self, task: Task) -> str:
        return pretty_json(task.result)

    @admin.display(description="last error")
    def last_error_shown(self, task: Task) -> str:
        # Cut as each error of the history below is: an error may be megabytes long.
        error = task.last_error
        if error is None:
            return EMPTY
        if len(error) <= ERROR_CHARS_SHOWN:
            return error
        return f"{error[:ERROR_CHARS_SHOWN]}\n[cut: {len(error)} characters in all]"

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
        if term.startswith(KEY_SEARCH) and len(term) > len(KEY_SEARCH):
            # The box strips spaces at the ends: a key that has some is reached by ?key= instead.
            return queryset.filter(key=term[len(KEY_SEARCH) :]), False
        # Names match exactly: an equality the indexes (and a LIMIT walk) serve, where
        # "contains" on a queue would scan every row whatever the list's other filters.
        match = (
            Q(queue=term)
            | Q(type=term)
            | Q(idempotency_key=term)
            | Q(key=term)
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

"""Admin of the dead-letter queue: requeue and discard, in chunks, through broker.queue."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import ERROR_FLAG, PAGE_VAR
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.translation import ngettext

from broker import queue
from broker.admin import audit
from broker.admin.display import when
from broker.admin.lists import (
    KeyFilter,
    QueueFilter,
    TypeFilter,
)
from broker.admin.tasks import TaskAdmin
from broker.api.errors import json_error
from broker.exceptions import TaskNotFound
from broker.models import DeadTask, Task
from broker.states import State
from contract.limits import parse_task_id

REQUEUE_CHUNK = 1000


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
        "short_id", "queue", "type", "workflow_column", "priority_name", "attempts_of_max",
        "error_preview", "died_at",
    )  # fmt: skip
    list_filter = (QueueFilter, KeyFilter, TypeFilter, "priority")
    date_hierarchy = "updated_at"
    ordering = ("-updated_at",)
    sortable_by = ("short_id", "died_at")
    actions = ("requeue_selected", "requeue_all_matching", "discard_selected")
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

    @admin.action(description="Discard selected (cancelled, never retried)", permissions=["change"])
    def discard_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        moved = queue.discard_many(queryset.values_list("pk", flat=True))
        self._report(request, moved, "discarded")

    @admin.action(description="Requeue all matching the current filter", permissions=["change"])
    def requeue_all_matching(self, request: HttpRequest, queryset: QuerySet | None = None) -> None:
        # The selection does not matter: the list's filters and search (the query string) do.
        matching = self.get_changelist_instance(request).get_queryset(request)
        chosen = list(matching.values_list("pk", flat=True)[: audit.MAX_LOGGED + 1])
        self._report(request, requeue_matching(matching))
        audit.log(request, self.model, chosen, "Requeued (all matching the filter).")

    requeue_all_matching.logs_itself = True  # broker.admin.audit

    def _report(self, request: HttpRequest, moved: int, done: str = "requeued") -> None:
        message = ngettext("%d task %s.", "%d tasks %s.", moved) % (moved, done)
        # A selection made on a page shown before: some may have left the DLQ since.
        chosen = len(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME))
        if request.POST.get("select_across", "0") == "0" and chosen > moved:
            left = chosen - moved
            message += (
                ngettext(
                    " %d selected was no longer dead.", " %d selected were no longer dead.", left
                )
                % left
            )
        self.message_user(request, message)

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
            if ERROR_FLAG in request.GET:
                # Django's mark of a filter it could not read (it then lists every dead task):
                # "all matching" would requeue the whole DLQ, not what the person filtered.
                self.message_user(
                    request,
                    "The filter in the address was not understood: choose it again. "
                    "Nothing was requeued.",
                    messages.WARNING,
                )
            else:
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
        pk = parse_task_id(object_id)
        if pk is not None and not DeadTask.objects.filter(pk=pk).exists():
            # A link to the DLQ from before the task left it: its page among the tasks, not
            # Django's "doesn't exist. Perhaps it was deleted?".
            state = Task.objects.filter(pk=pk).values_list("state", flat=True).first()
            if state is not None:
                self.message_user(
                    request, f"Task #{object_id} is no longer dead: it is {state}.", messages.INFO
                )
                return HttpResponseRedirect(reverse("admin:broker_task_change", args=[object_id]))
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
        if request.method != "POST":  # JSON, as every error answer is
            refused = json_error(405, f"Method {request.method} is not allowed here: POST.")
            refused["Allow"] = "POST"
            return refused
        if not self.may_requeue(request):
            raise PermissionDenied
        changelist = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist")
        try:
            if not (object_id.isdigit() and len(object_id) < 19):  # a bigint, or no task
                raise TaskNotFound
            queue.requeue(int(object_id))
            audit.log(request, self.model, [int(object_id)], "Requeued.")
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

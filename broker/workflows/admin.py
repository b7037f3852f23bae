"""Admin: workflows listed with their state, each drawn as its graph (dagre lays it out) that
follows the workflow while it runs, and cancelled through broker.queue."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.urls import URLPattern, path, reverse
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html

from broker import queue
from broker.admin.display import EMPTY, ReadOnly, when
from broker.api.errors import json_error
from broker.models import Workflow
from broker.states import State
from broker.workflows import page, reading
from contract.limits import parse_task_id
from contract.wording import counted


class WorkflowStateFilter(admin.SimpleListFilter):
    """running, succeeded, failed, cancelled: derived from the steps (broker.workflows.reading)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(state, state) for state in reading.STATES]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() in reading.STATES:
            return reading.with_state(queryset).filter(reading.state_filter(str(self.value())))
        return queryset


@admin.register(Workflow)
class WorkflowAdmin(ReadOnly, admin.ModelAdmin):
    """Read-only: a workflow moves only through its steps; "Cancel" cancels the steps left, as
    DELETE /workflows/{id} does."""

    list_display = ("short_id", "name", "state", "steps", "created")
    list_display_links = ("short_id", "name")
    list_filter = (WorkflowStateFilter,)
    search_fields = ("name",)
    ordering = ("-id",)
    list_per_page = 50
    show_full_result_count = False
    fields = ("short_id", "name", "state", "steps", "created")
    readonly_fields = fields
    actions = ("cancel_selected",)
    change_list_template = "admin/broker/workflow/change_list.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        # Each row's steps counted by state in the page's one query (not one query a row).
        counts = {
            f"n_{state}": Count("tasks", filter=Q(tasks__state=state)) for state in State.values
        }
        return super().get_queryset(request).annotate(**counts)

    @staticmethod
    def _counts(workflow: Workflow) -> dict[str, int]:
        return {state: getattr(workflow, f"n_{state}", 0) for state in State.values}

    @admin.display(description="id", ordering="id")
    def short_id(self, workflow: Workflow) -> str:
        return f"#{workflow.pk}"

    @admin.display(description="state")
    def state(self, workflow: Workflow) -> str:
        return reading.state_of(self._counts(workflow))

    @admin.display(description="steps by state")
    def steps(self, workflow: Workflow) -> str:
        return page.by_state(self._counts(workflow)) or EMPTY

    @admin.display(description="created", ordering="created_at")
    def created(self, workflow: Workflow) -> str:
        return when(workflow.created_at, timespec="seconds")

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        pk = parse_task_id(object_id)
        graph = None if pk is None else page.graph(pk)
        extra = {
            **(extra_context or {}),
            "graph_json": graph,
            "graph_url": None if graph is None else reverse(self._url("graph"), args=[pk]),
            "may_cancel": graph is not None and self.has_change_permission(request),
        }
        return super().change_view(request, object_id, form_url, extra)

    def get_urls(self) -> list[URLPattern]:
        own = [
            path("<path:object_id>/graph.json", self.graph_view, name=self._url("graph", "")),
            path(
                "<path:object_id>/cancel/",
                self.admin_site.admin_view(self.cancel_view),
                name=self._url("cancel", ""),
            ),
        ]
        return own + super().get_urls()

    def _url(self, what: str, namespace: str = "admin:") -> str:
        return f"{namespace}{self.opts.app_label}_{self.opts.model_name}_{what}"

    def graph_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: the graph's states and durations as JSON, which the page polls while the
        workflow runs; for staff who may view workflows (JSON 403 otherwise, not a login page)."""
        user = request.user
        if not (user.is_active and user.is_staff and self.has_view_or_change_permission(request)):
            return json_error(403, "Staff login with view permission on workflows required.")
        if request.method not in ("GET", "HEAD"):
            refused = json_error(405, f"Method {request.method} is not allowed here: GET.")
            refused["Allow"] = "GET"
            return refused
        pk = parse_task_id(object_id)
        graph = None if pk is None else page.graph(pk)
        if graph is None:
            return json_error(404, "No such workflow.")
        response = JsonResponse(graph)
        add_never_cache_headers(response)
        return response

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: the page's "Cancel workflow" button, the same move as DELETE /workflows/{id}."""
        if request.method != "POST":  # JSON, as every error answer is
            refused = json_error(405, f"Method {request.method} is not allowed here: POST.")
            refused["Allow"] = "POST"
            return refused
        if not self.has_change_permission(request):
            raise PermissionDenied
        pk = parse_task_id(object_id)
        workflow = None if pk is None else Workflow.objects.filter(pk=pk).first()
        if workflow is None:
            self.message_user(request, f"No workflow #{object_id}.", messages.WARNING)
            return HttpResponseRedirect(reverse(self._url("changelist")))
        self._cancel(request, [workflow])
        return HttpResponseRedirect(reverse(self._url("change"), args=[workflow.pk]))

    @admin.action(description="Cancel selected workflows", permissions=["change"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._cancel(request, list(queryset.order_by("pk")))

    cancel_selected.logs_itself = True  # broker.admin.audit

    def _cancel(self, request: HttpRequest, workflows: list[Workflow]) -> None:
        """Each workflow's steps not yet done, dead or cancelled are cancelled in one transaction
        (queue.cancel_steps); each cancel is written in the admin log."""
        untouched = 0
        for workflow in workflows:
            moved = queue.cancel_steps(workflow.pk)
            if not moved:
                untouched += 1
                continue
            self.log_change(request, workflow, f"Cancelled {counted(moved, 'step')}.")
            url = reverse(self._url("change"), args=[workflow.pk])
            self.message_user(
                request,
                format_html(
                    'Workflow <a href="{}">#{}</a> cancelled: {}.',
                    url, workflow.pk, counted(moved, "step"),
                ),
            )  # fmt: skip
        if untouched:
            self.message_user(
                request,
                f"{counted(untouched, 'workflow')} had no step left to cancel.",
                messages.WARNING,
            )


def workflow_link(task: Any) -> str:
    """For a task's admin page: its workflow (and step), linked."""
    if task.workflow_id is None:
        return EMPTY
    url = reverse("admin:broker_workflow_change", args=[task.workflow_id])
    return format_html('<a href="{}">workflow #{}</a>, step {}', url, task.workflow_id, task.ref)


def workflow_cell(task: Any) -> str:
    """For a list of tasks: its workflow and step, short, linked to the workflow's page."""
    if task.workflow_id is None:
        return EMPTY
    url = reverse("admin:broker_workflow_change", args=[task.workflow_id])
    return format_html('<a href="{}">#{}</a> {}', url, task.workflow_id, task.ref)

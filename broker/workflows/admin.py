"""Admin: workflows listed with their state, and each drawn as its graph (dagre lays it out)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from broker.admin.display import EMPTY, ReadOnly, when
from broker.models import Workflow
from broker.states import State
from broker.workflows import reading

STATE_COLOURS = {
    "blocked": "#9e9e9e", "ready": "#1e88e5", "handed_out": "#fb8c00", "delayed": "#8e24aa",
    "dead": "#e53935", "done": "#43a047", "cancelled": "#616161",
}  # fmt: skip


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
    """Read-only: a workflow moves only through its steps (and DELETE /workflows/{id})."""

    list_display = ("short_id", "name", "state", "steps", "created")
    list_display_links = ("short_id", "name")
    list_filter = (WorkflowStateFilter,)
    search_fields = ("name",)
    ordering = ("-id",)
    list_per_page = 50
    show_full_result_count = False
    fields = ("short_id", "name", "state", "steps", "created")
    readonly_fields = fields

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
        return ", ".join(f"{n} {s}" for s, n in self._counts(workflow).items() if n) or EMPTY

    @admin.display(description="created", ordering="created_at")
    def created(self, workflow: Workflow) -> str:

        return when(workflow.created_at, timespec="seconds")

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        extra = {**(extra_context or {}), "graph_json": _graph_json(object_id)}
        return super().change_view(request, object_id, form_url, extra)


def _graph_json(object_id: str) -> dict[str, Any] | None:
    """The nodes (each step: ref, state, colour, link to its task) and edges (after) to draw."""
    try:
        body = reading.describe(int(object_id))
    except (ValueError, reading.WorkflowNotFound):
        return None
    ids = {step["ref"]: step["id"] for step in body["steps"]}
    nodes = [
        {"ref": s["ref"], "id": s["id"], "state": s["state"], "attempts": s["attempts"],
         "colour": STATE_COLOURS.get(s["state"], "#000"),
         "url": reverse("admin:broker_task_change", args=[s["id"]])}
        for s in body["steps"]
    ]  # fmt: skip
    edges = [
        {"from": ids.get(parent, parent), "to": s["id"]}
        for s in body["steps"]
        for parent in s["after"]
    ]
    return {"nodes": nodes, "edges": edges, "colours": STATE_COLOURS}


def workflow_link(task: Any) -> str:
    """For a task's admin page: its workflow (and step), linked."""
    if task.workflow_id is None:
        return EMPTY
    url = reverse("admin:broker_workflow_change", args=[task.workflow_id])
    return format_html('<a href="{}">workflow #{}</a>, step {}', url, task.workflow_id, task.ref)

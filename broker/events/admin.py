"""Admin's Approvals page: the tasks waiting for the event `approval`, each with Approve and
Reject (an optional note). A click posts the event `approval` with the wait's key and
{"approved", "by", "note"} as its data (broker.queue.events), and admin's log records it."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from broker.admin import audit
from broker.admin.display import EMPTY, ReadOnly, when
from broker.api.errors import json_error
from broker.models import Approval, EventWait, Task
from broker.queue import events
from broker.states import State
from contract.limits import APPROVAL_EVENT, parse_task_id

DECIDE = "broker.decide_approval"
MAX_NOTE = 1000
PAYLOAD_SHOWN = 200


@admin.register(Approval)
class ApprovalAdmin(ReadOnly, admin.ModelAdmin):
    """Blocked tasks waiting for `approval`, oldest wait first, with their decision buttons."""

    list_display = (
        "task_link", "queue", "key", "waiting_since", "payload_preview", "workflow_link", "decide",
    )  # fmt: skip
    list_display_links = None
    ordering = ("began_at",)
    actions = None
    change_list_template = "admin/broker/approval/change_list.html"
    search_fields = ("key",)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = {"title": "Tasks waiting for approval", **(extra_context or {})}
        return super().changelist_view(request, extra)

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        waits = super().get_queryset(request).select_related("task")
        return waits.filter(name=APPROVAL_EVENT, task__state=State.BLOCKED)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(DECIDE) or super().has_view_permission(request, obj)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(DECIDE) or super().has_module_permission(request)

    @admin.display(description="task", ordering="task_id")
    def task_link(self, wait: EventWait) -> str:
        url = reverse("admin:broker_task_change", args=[wait.task_id])
        return format_html('<a href="{}">#{}</a>', url, wait.task_id)

    @admin.display(description="queue")
    def queue(self, wait: EventWait) -> str:
        return wait.task.queue

    @admin.display(description="waiting since", ordering="began_at")
    def waiting_since(self, wait: EventWait) -> str:
        return when(wait.began_at, timespec="seconds")

    @admin.display(description="payload")
    def payload_preview(self, wait: EventWait) -> str:
        text = wait.task.payload
        return text if len(text) <= PAYLOAD_SHOWN else text[: PAYLOAD_SHOWN - 1] + "…"

    @admin.display(description="workflow")
    def workflow_link(self, wait: EventWait) -> str:
        task = wait.task
        if task.workflow_id is None:
            return EMPTY
        url = reverse("admin:broker_workflow_change", args=[task.workflow_id])
        return format_html('<a href="{}">#{}</a> {}', url, task.workflow_id, task.ref or "")

    @admin.display(description="decide")
    def decide(self, wait: EventWait) -> str:
        # The inputs belong to a form of their own (HTML's form attribute), rendered after the
        # list: a form cannot sit inside the list's own form.
        form = f"decide-{wait.task_id}"
        return format_html(
            '<input type="text" name="note" form="{}" maxlength="{}" placeholder="note '
            '(optional)" aria-label="note"> '
            '<button type="submit" name="decision" value="approve" form="{}">Approve</button> '
            '<button type="submit" name="decision" value="reject" form="{}">Reject</button>',
            form, MAX_NOTE, form, form,
        )  # fmt: skip

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        own = [
            path(
                "<path:object_id>/decide/",
                self.admin_site.admin_view(self.decide_view),
                name="{}_{}_decide".format(*info),
            )
        ]
        return own + super().get_urls()

    def decide_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST decision=approve|reject (and note): the event `approval` with the task's key."""
        if request.method != "POST":
            refused = json_error(405, f"Method {request.method} is not allowed here: POST.")
            refused["Allow"] = "POST"
            return refused
        if not request.user.has_perm(DECIDE):
            raise PermissionDenied
        changelist = reverse("admin:broker_approval_changelist")
        decision = request.POST.get("decision")
        note = request.POST.get("note", "")[:MAX_NOTE]
        pk = parse_task_id(object_id)
        wait = self.get_queryset(request).filter(task_id=pk).first() if pk is not None else None
        if decision not in ("approve", "reject") or wait is None:
            self.message_user(
                request,
                f"Task #{object_id} is not waiting for approval (decided already?): nothing sent.",
                messages.WARNING,
            )
            return HttpResponseRedirect(changelist)
        approved = decision == "approve"
        data = {"approved": approved, "by": request.user.get_username(), "note": note}
        text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
        posted = events.post_event(APPROVAL_EVENT, wait.key, text, None)
        verdict = "Approved" if approved else "Rejected"
        said = f"{verdict} (event approval {wait.key!r}, #{posted.pk})" + (
            f": {note}" if note else "."
        )
        audit.log(request, Task, [wait.task_id], said)
        url = reverse("admin:broker_task_change", args=[wait.task_id])
        shown = format_html(
            '{} task <a href="{}">#{}</a>: {} released.', verdict, url, pk, posted.released
        )
        self.message_user(request, shown)
        return HttpResponseRedirect(changelist)

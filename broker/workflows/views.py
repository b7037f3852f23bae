"""POST/GET /workflows and GET/DELETE /workflows/{id} (API.md "Workflows")."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from broker import queue
from broker.api import parsing
from broker.api.base import BrokerView, under
from broker.api.errors import ValidationFailed
from broker.exceptions import InvalidTransition
from broker.models import Workflow
from broker.tokens import access
from broker.workflows import graph, reading
from contract.limits import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, MAX_WORKFLOW_NAME


def _workflow_pk(raw: str) -> int:
    pk = parsing.task_id(raw)  # ids of one shape
    if pk is None:
        raise reading.WorkflowNotFound()
    return pk


class WorkflowsView(BrokerView):
    """POST /workflows submits a graph, all or nothing; GET /workflows lists, newest first."""

    grants = {"post": "produce", "get": "read"}

    def post(self, request: Request) -> Response:
        body = parsing.read_object(request)
        try:
            workflow_id, tasks = graph.submit(body, lambda t: access.enqueue_spec(request, t))
        except graph.WorkflowError as exc:
            raise ValidationFailed(exc.fields) from exc
        return Response(
            {"id": str(workflow_id), "tasks": {ref: str(pk) for ref, pk in tasks.items()}},
            status=201,
            headers={"Location": under(request, workflow_id)},
        )

    def get(self, request: Request) -> Response:
        params = request.GET
        found = access.visible_workflows(request, Workflow.objects.all())
        state, name = parsing.query_text(params, "state"), parsing.query_text(params, "name")
        if state is not None:
            if state not in reading.STATES:
                raise ValidationFailed({"state": [f"Must be one of {', '.join(reading.STATES)}."]})
            found = reading.with_state(found).filter(reading.state_filter(state))
        if name is not None:
            if len(name) > MAX_WORKFLOW_NAME or "\x00" in name:
                raise ValidationFailed({"name": ["Not a workflow name."]})
            found = found.filter(name=name)
        page, next_url = parsing.newest_first(request, found, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        return Response({"results": reading.summaries(page), "next": next_url})


class WorkflowView(BrokerView):
    """GET /workflows/{id} with its steps; DELETE cancels every step left."""

    http_method_names = ("get", "head", "delete", "options")
    grants = {"get": "read", "delete": "manage"}

    def get(self, request: Request, workflow_id: str) -> Response:
        pk = _workflow_pk(workflow_id)
        access.require_workflow(request, "read", pk, reading.WorkflowNotFound)
        return Response(reading.describe(pk))

    def delete(self, request: Request, workflow_id: str) -> Response:
        parsing.no_body(request)
        pk = _workflow_pk(workflow_id)
        access.require_workflow(request, "manage", pk, reading.WorkflowNotFound)
        if not Workflow.objects.filter(pk=pk).exists():
            raise reading.WorkflowNotFound()
        if not queue.cancel_steps(pk):
            raise InvalidTransition("No step of the workflow was left to cancel.")
        return Response(status=204)

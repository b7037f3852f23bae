"""The OpenAPI of /workflows: its operations and shapes, merged into the API's by broker/api."""

from __future__ import annotations

from broker.api.schema_components import _COUNT, _TEXT_OR_NULL, _TIME, Schema, _object, ref
from broker.api.schema_operations import (
    BAD_REQUEST,
    LIMIT,
    _body,
    _op,
    _query,
    answer,
    error_answer,
)
from broker.states import State
from contract import limits
from contract.limits import TASK_ID_PATTERN

_ID: Schema = {"type": "string", "pattern": TASK_ID_PATTERN}
_REF: Schema = {"type": "string", "pattern": f"^{limits.REF_RULE}$"}
_SUMMARY: dict[str, Schema] = {
    "id": {"type": "string"},
    "name": {"type": "string"},
    "state": {"type": "string", "enum": ["running", "succeeded", "failed", "cancelled"]},
    "created_at": _TIME,
    "updated_at": _TIME,
    "counts": _object(dict.fromkeys(State.values, _COUNT), list(State.values)),
}
_STEP: Schema = _object(
    {
        "ref": _REF,
        "job": {**ref("EnqueueRequest"), "description": "A POST /jobs body without `after`."},
        "after": {"type": "array", "items": _REF, "maxItems": limits.MAX_AFTER,
                  "description": "Refs of steps of this workflow to wait for."},
        "after_policy": {"type": "string", "enum": list(limits.AFTER_POLICIES),
                         "default": limits.DEFAULT_AFTER_POLICY},
    },
    ["ref", "job"],
    closed=True,
)  # fmt: skip

COMPONENTS: dict[str, Schema] = {
    "WorkflowRequest": _object(
        {
            "name": {"type": "string", "minLength": 1, "maxLength": limits.MAX_WORKFLOW_NAME},
            "steps": {
                "type": "array",
                "items": _STEP,
                "minItems": 1,
                "maxItems": limits.MAX_WORKFLOW_STEPS,
            },
        },
        ["name", "steps"],
        closed=True,
    ),
    "WorkflowCreated": _object(
        {
            "id": {"type": "string"},
            "tasks": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Each step's ref and its task's id.",
            },
        },
        ["id", "tasks"],
    ),
    "WorkflowSummary": _object(_SUMMARY, list(_SUMMARY)),
    "Workflow": _object(
        {
            **_SUMMARY,
            "steps": {
                "type": "array",
                "items": _object(
                    {
                        "ref": {"type": "string"},
                        "id": {"type": "string"},
                        "state": ref("State"),
                        "after": {"type": "array", "items": {"type": "string"}},
                        "attempts": _COUNT,
                        "last_error": _TEXT_OR_NULL,
                    },
                    ["ref", "id", "state", "after", "attempts", "last_error"],
                ),
            },
        },
        [*_SUMMARY, "steps"],
    ),
    "WorkflowPage": _object(
        {
            "results": {"type": "array", "items": ref("WorkflowSummary")},
            "next": {"type": "string", "nullable": True, "description": "URL of the next page."},
        },
        ["results", "next"],
    ),
}

_WORKFLOW_ID = {"name": "workflow_id", "in": "path", "required": True, "schema": _ID}
_NO_WORKFLOW = error_answer("No such workflow.")

OPERATIONS: dict[str, dict[str, Schema]] = {
    "broker.workflows.views.WorkflowsView": {
        "post": _op(
            "submit_workflow",
            "Submit a graph of tasks, all or nothing",
            "workflows",
            {
                201: answer("Created: every step a task.", ref("WorkflowCreated")),
                400: error_answer("A bad step or a cycle; `fields` names it (`steps.3.after.0`)."),
                409: error_answer(
                    "A step's unique key is held (outside, or by an earlier step); `fields` "
                    "names it (`steps.3.job.unique`). Nothing created."
                ),
            },
            requestBody=_body(ref("WorkflowRequest"), required=True),
        ),
        "get": _op(
            "list_workflows",
            "List workflows",
            "workflows",
            {200: answer("Newest first.", ref("WorkflowPage")), 400: BAD_REQUEST},
            parameters=[
                _query("state", _SUMMARY["state"], "Only workflows in this state."),
                _query("name", {"type": "string", "minLength": 1}, "Only workflows of this name."),
                LIMIT,
                _query("cursor", _ID, "Where the page starts: from the previous page's `next`."),
            ],
        ),
    },
    "broker.workflows.views.WorkflowView": {
        "get": _op(
            "get_workflow",
            "One workflow, with its steps",
            "workflows",
            {200: answer("The workflow.", ref("Workflow")), 404: _NO_WORKFLOW},
            parameters=[_WORKFLOW_ID],
        ),
        "delete": _op(
            "cancel_workflow",
            "Cancel every step not yet done, dead or cancelled",
            "workflows",
            {
                204: answer("Cancelled."),
                404: _NO_WORKFLOW,
                409: error_answer("No step was left to cancel."),
            },
            parameters=[_WORKFLOW_ID],
        ),
    },
}

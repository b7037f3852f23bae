"""Workflows as API.md shows them: a state derived from their steps' states, counts, steps."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from django.db.models import Count, Exists, Max, OuterRef, Q, QuerySet
from django.db.models.functions import Substr

from broker.exceptions import NotFound
from broker.models import Dependency, Task, Workflow
from broker.queue.base import api_time
from broker.states import State
from contract.limits import LISTED_ERROR_CHARS

STATES = ("running", "succeeded", "failed", "cancelled")
_FINISHED = (State.DONE, State.CANCELLED)


class WorkflowNotFound(NotFound):
    """No such workflow."""


def _steps_in(*states: str, negate: bool = False) -> Exists:
    steps = Task.objects.filter(workflow_id=OuterRef("pk"))
    return Exists(steps.exclude(state__in=states) if negate else steps.filter(state__in=states))


def with_state(workflows: QuerySet) -> QuerySet:
    """Annotate `failed`, `unfinished` and `live`: what the state is made of, one EXISTS each
    (a page of a long list reads each workflow's steps only until one answers)."""
    return workflows.annotate(
        any_dead=_steps_in(State.DEAD),
        any_not_done=_steps_in(State.DONE, negate=True),
        any_live=_steps_in(*_FINISHED, State.DEAD, negate=True),
    )


def state_filter(state: str) -> Q:
    """The annotated workflows (with_state) in `state`."""
    return {
        "failed": Q(any_dead=True),
        "succeeded": Q(any_dead=False, any_not_done=False),
        "cancelled": Q(any_dead=False, any_not_done=True, any_live=False),
        "running": Q(any_dead=False, any_live=True),
    }[state]


def state_of(counts: dict[str, int]) -> str:
    """failed while a step is dead; succeeded when all are done; cancelled when all are done or
    cancelled; else running."""
    if counts.get(State.DEAD):
        return "failed"
    total = sum(counts.values())
    if counts.get(State.DONE, 0) == total:
        return "succeeded"
    if counts.get(State.DONE, 0) + counts.get(State.CANCELLED, 0) == total:
        return "cancelled"
    return "running"


def summaries(workflows: list[Workflow]) -> list[dict[str, Any]]:
    """Each workflow as GET /workflows lists it: id, name, state, times, counts."""
    counts: dict[int, dict[str, int]] = defaultdict(dict)
    updated: dict[int, datetime] = {}
    rows = (
        Task.objects.filter(workflow_id__in=[w.pk for w in workflows])
        .values("workflow_id", "state")
        .annotate(n=Count("pk"), last=Max("updated_at"))
        .order_by()
    )
    for row in rows:
        workflow_id, last = row["workflow_id"], row["last"]
        counts[workflow_id][row["state"]] = row["n"]
        updated[workflow_id] = max(updated.get(workflow_id, last), last)
    return [_summary(w, counts[w.pk], updated.get(w.pk)) for w in workflows]


def _summary(
    workflow: Workflow, counts: dict[str, int], updated: datetime | None
) -> dict[str, Any]:
    return {
        "id": str(workflow.pk),
        "name": workflow.name,
        "state": state_of(counts),
        "created_at": api_time(workflow.created_at),
        "updated_at": api_time(updated or workflow.created_at),
        "counts": {state: counts.get(state, 0) for state in State.values},
    }


def describe(workflow_id: int) -> dict[str, Any]:
    """GET /workflows/{id}: the summary and every step, in the order given, each step's error cut
    as a list page cuts it (the whole one is its task's). Raises WorkflowNotFound."""
    workflow = Workflow.objects.filter(pk=workflow_id).first()
    if workflow is None:
        raise WorkflowNotFound()
    steps = list(
        Task.objects.filter(workflow_id=workflow_id)
        .annotate(error_head=Substr("last_error", 1, LISTED_ERROR_CHARS))
        .order_by("pk")
        .values_list("pk", "ref", "state", "attempts", "error_head", "updated_at")
    )
    refs = {pk: ref for pk, ref, *_ in steps}
    after: dict[int, list[str]] = defaultdict(list)
    for child, parent in (
        Dependency.objects.filter(child__workflow_id=workflow_id, key_order=False)
        .order_by("child_id", "position")
        .values_list("child_id", "parent_id")
    ):
        after[child].append(refs.get(parent, str(parent)))
    counts: dict[str, int] = defaultdict(int)
    for _, _, state, *_ in steps:
        counts[state] += 1
    last = max((row[5] for row in steps), default=None)
    body = _summary(workflow, counts, last)
    body["steps"] = [
        {"ref": ref, "id": str(pk), "state": state, "after": after.get(pk, []),
         "attempts": attempts, "last_error": last_error}
        for pk, ref, state, attempts, last_error, _ in steps
    ]  # fmt: skip
    return body

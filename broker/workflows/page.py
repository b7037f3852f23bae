"""A workflow's admin page: its steps as the graph draws them (state in words and colour, how long
each ran, a link to its task) and its state, read afresh by the page while the workflow runs."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from django.urls import reverse

from broker.models import Dependency, EventWait, Task, Workflow
from broker.queue.base import current_time
from broker.states import TRANSITIONS, State
from broker.workflows import reading

STATE_COLOURS = {
    "blocked": "#9e9e9e", "ready": "#1e88e5", "handed_out": "#fb8c00", "delayed": "#8e24aa",
    "dead": "#e53935", "done": "#43a047", "cancelled": "#616161",
}  # fmt: skip
LABELS = {state.value: state.label for state in State}
# A step's duration is its last attempt's: from its claim to its end (ack, nack, lapse or cancel),
# or to now while it is handed out. Time spent blocked, queued or backing off is not in it.
TIMED = (State.DONE, State.DEAD, State.CANCELLED)
LIVE = TRANSITIONS["cancel"][0]  # what a cancel of the workflow would move
DURATION_MEANS = "Durations: each step's last attempt, from its claim to its end (or to now)."


def label(state: str) -> str:
    """A task state in words ("handed out"); a workflow's states are words already."""
    return LABELS.get(state, state)


def took(ms: int) -> str:
    """1.2 s, 350 ms, 3 min 20 s, 2 h 5 min: as precise as a glance needs."""
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, second = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {second} s"
    hours, minute = divmod(minutes, 60)
    return f"{hours} h {minute} min"


def by_state(counts: dict[str, int]) -> str:
    """ "2 done, 1 handed out": the steps counted by state, in the states' order."""
    return ", ".join(f"{counts[s]} {label(s)}" for s in State.values if counts.get(s))


def _duration(state: str, claimed: datetime | None, ended: datetime, now: datetime) -> int | None:
    if claimed is None:
        return None
    if state == State.HANDED_OUT:
        return max(0, int((now - claimed).total_seconds() * 1000))
    if state in TIMED:
        return max(0, int((ended - claimed).total_seconds() * 1000))
    return None  # waiting again (a retry, a requeue): its last run is over, the next not begun


def graph(workflow_id: int) -> dict[str, Any] | None:
    """{"state", "running", "cancellable", "steps_by_state", "nodes", "edges", "colours",
    "durations"}: each
    node a step ({"ref", "id", "state", "label", "colour", "attempts", "url", "duration_ms",
    "duration"}), each edge an `after` (task ids); None for no such workflow."""
    if not Workflow.objects.filter(pk=workflow_id).exists():
        return None
    rows = list(
        Task.objects.filter(workflow_id=workflow_id)
        .order_by("pk")
        .values_list("pk", "ref", "state", "attempts", "claimed_at", "updated_at")
    )
    now = current_time()
    # A step blocked on an event says which ("blocked, waits for approval"), in one query.
    blocked = [pk for pk, _, state, *_ in rows if state == State.BLOCKED]
    waits = dict(
        EventWait.objects.filter(task_id__in=blocked).values_list("task_id", "name")
    ) if blocked else {}  # fmt: skip
    nodes = []
    for pk, ref, state, attempts, claimed, updated in rows:
        ms = _duration(state, claimed, updated, now)
        shown = f"{label(state)}, waits for {waits[pk]}" if pk in waits else label(state)
        nodes.append({
            "ref": ref, "id": str(pk), "state": state, "label": shown,
            "colour": STATE_COLOURS.get(state, "#000"), "attempts": attempts,
            "url": reverse("admin:broker_task_change", args=[pk]),
            "duration_ms": ms, "duration": None if ms is None else took(ms),
        })  # fmt: skip
    steps = {pk for pk, *_ in rows}
    edges = [
        {"from": str(parent), "to": str(child)}
        for child, parent in Dependency.objects.filter(
            child__workflow_id=workflow_id, key_order=False
        )
        .order_by("child_id", "position")
        .values_list("child_id", "parent_id")
        if parent in steps
    ]
    counts = Counter(state for _, _, state, *_ in rows)
    state = reading.state_of(counts)
    return {
        "state": state,
        "running": state == "running",
        # DELETE /workflows/{id} would cancel something (a failed workflow may have steps left).
        "cancellable": any(counts.get(s) for s in LIVE),
        "steps_by_state": by_state(counts),
        "nodes": nodes,
        "edges": edges,
        "colours": {label(s): colour for s, colour in STATE_COLOURS.items()},
        "durations": DURATION_MEANS,
    }

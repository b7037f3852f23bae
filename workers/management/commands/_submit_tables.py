"""What submit prints: the status table of its tasks, a workflow's steps, a progress line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

COLUMNS = ("ID", "TYPE", "PRIORITY", "STATE", "ATTEMPTS", "RESULT / LAST ERROR")


OUTCOME_WIDTH = 60


def outcome(task: dict[str, Any]) -> str:
    """What to show for a task: its result once done, else its last error, else "-"; one line."""
    if task.get("state") == "done":
        text = json.dumps(task.get("result"), ensure_ascii=False, separators=(",", ":"))
    elif task.get("last_error"):
        text = str(task["last_error"])
    else:
        return "-"
    # One line per task: an error may carry a whole traceback.
    first, *rest = text.strip().splitlines() or [""]
    if rest or len(first) > OUTCOME_WIDTH:
        return first[: OUTCOME_WIDTH - 1] + "…"
    return first


def table(tasks: Sequence[dict[str, Any]]) -> str:
    """A plain fixed-width status table, one row per task, header first."""
    rows = [COLUMNS] + [
        (
            t["id"],
            t.get("type") or "-",
            t.get("priority", "-"),
            t.get("state", "-"),
            str(t.get("attempts", "-")),
            outcome(t),
        )
        for t in tasks
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    )


def workflow_table(workflow: dict[str, Any], tasks: Sequence[dict[str, Any]]) -> str:
    """The workflow's state, then a row per step: ref, id, after, state, result."""
    results = {t["id"]: t for t in tasks}
    rows = [("REF", "ID", "AFTER", "STATE", "RESULT / LAST ERROR")] + [
        (s["ref"], s["id"], ",".join(s["after"]) or "-", s["state"],
         outcome(results.get(s["id"], s)))
        for s in workflow["steps"]
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
             for row in rows]  # fmt: skip
    head = f"\nworkflow {workflow['id']} ({workflow['name']}): {workflow['state']}"
    return "\n".join([head, *lines])


def progress_line(task: dict[str, Any]) -> str:
    """A task's last progress report, one line: "batch_import: 40% row 24 of 60"."""
    shown = task.get("progress") or {}
    fraction, message = shown.get("fraction"), shown.get("message")
    parts = [f"{task.get('type') or 'task'}:"]
    if fraction is not None:
        parts.append(f"{fraction:.0%}")
    if message:
        parts.append(str(message).splitlines()[0][:OUTCOME_WIDTH])
    return " ".join(parts)

"""GET /jobs, /jobs/{id} and /dlq: newest first, keyset-paginated so a walk sees each task once;
a page bounded in size whatever its tasks hold (API.md's Errors, "Bounded work")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, F, QuerySet, Window
from django.db.models.functions import Coalesce, Length, RowNumber, Substr
from rest_framework.request import Request
from rest_framework.response import Response

from broker.api import parsing
from broker.api.errors import ValidationFailed
from broker.api.renderers import up_to_answer_size
from broker.api.representation import ShownError, listed_task
from broker.exceptions import TaskNotFound
from broker.models import Task, TaskError
from broker.queue import dependencies
from broker.queue.sizing import Bytes
from broker.states import State
from contract.limits import DEFAULT_PAGE_SIZE as DEFAULT_LIMIT
from contract.limits import LISTED_ERROR_CHARS, MAX_ANSWER_BYTES, MAX_KEY, MAX_UNIQUE_KEY
from contract.limits import MAX_PAGE_SIZE as MAX_LIMIT


@dataclass(frozen=True)
class Shown:
    """How much of a task's error history one answer shows (what is kept is broker.queue's)."""

    errors: int  # the newest this many errors
    chars: int  # of each error text, and of last_error


# A page of up to 500 tasks stays a few MB however long the histories: the latest errors say
# what is going wrong now. One task shows a whole run at the largest max_attempts (100), each
# error long enough for a full traceback.
IN_LISTS = Shown(errors=5, chars=LISTED_ERROR_CHARS)
FOR_ONE = Shown(errors=100, chars=16_384)


def _with_errors(tasks: list[Task], shown: Shown) -> list[dict[str, Any]]:
    """The tasks as answers show them; a list's (IN_LISTS) name their parents without results."""
    errors = _newest_errors([t.pk for t in tasks], shown)
    waited = [t.pk for t in tasks if t.after_policy is not None]
    whole = shown is FOR_ONE
    parents = dependencies.parents_of(waited, results=whole) if waited else {}
    return [
        listed_task(
            t,
            *errors.get(t.pk, ([], 0)),
            last_error=(t.last_error_head, t.last_error_length or 0),
            parents=parents.get(t.pk, ()),
            parent_results=whole,
        )
        for t in tasks
    ]


# What a task's stored JSON adds to a page: its payload, result, checkpoint and event go out as
# stored.
_STORED = (
    Coalesce(Bytes("payload"), 0) + Coalesce(Bytes("result"), 0)
    + Coalesce(Bytes("checkpoint"), 0) + Coalesce(Bytes("event"), 0)
)  # fmt: skip


def _within_answer(rows: list[Task]) -> list[int]:
    """The ids of `rows` (read with their `stored` bytes) a page could carry: up to the one whose
    stored JSON alone takes the page past MAX_ANSWER_BYTES. A page's other fields are bounded
    (errors cut, progress messages short), so what is read for it stays near that size too."""
    ids: list[int] = []
    size = 0
    for row in rows:
        if size > MAX_ANSWER_BYTES:
            break
        ids.append(row.pk)
        size += row.stored
    return ids


def _newest_errors(ids: list[int], shown: Shown) -> dict[int, tuple[list[ShownError], int]]:
    """task id → (its newest `shown.errors` errors, oldest first, cut; how many it has)."""
    if not ids:
        return {}
    # Two steps, so only the rows shown are read in full: ranking every error of a task with
    # its text would read each stored text whole, however many are left out.
    ranked = (
        TaskError.objects.filter(task_id__in=ids)
        .annotate(
            newest=Window(RowNumber(), partition_by=[F("task_id")], order_by=F("id").desc()),
            in_all=Window(Count("id"), partition_by=[F("task_id")]),
        )
        .filter(newest__lte=shown.errors)
        .values_list("id", "in_all")
    )
    counts = dict(ranked)
    rows = (
        TaskError.objects.filter(id__in=list(counts))
        .annotate(head=Substr("error", 1, shown.chars), length=Length("error"))
        .order_by("id")
        .values_list("id", "task_id", "attempt", "at", "head", "length")
    )
    out: dict[int, tuple[list[ShownError], int]] = {}
    for error_id, task_id, attempt, at, head, length in rows:
        out.setdefault(task_id, ([], counts[error_id]))[0].append(
            ShownError(attempt, at, head, length)
        )
    return out


def _cut(tasks: QuerySet, shown: Shown) -> QuerySet:
    """Tasks with last_error read cut to `shown.chars` (and its whole length), not whole."""
    return tasks.defer("last_error").annotate(
        last_error_head=Substr("last_error", 1, shown.chars),
        last_error_length=Length("last_error"),
    )


def one_task(pk: int) -> dict[str, Any]:
    task = _cut(Task.objects.filter(pk=pk), FOR_ONE).first()
    if task is None:
        raise TaskNotFound()
    return _with_errors([task], FOR_ONE)[0]


def list_tasks(
    request: Request,
    tasks: Any,
    allow_filters: tuple[str, ...] = ("state", "queue", "type", "workflow", "key", "unique_key"),
) -> Response:
    filters: dict[str, Any] = {}
    for name in allow_filters:
        value = parsing.query_text(request.GET, name)
        if value is not None:
            filters[name] = value
    if "state" in filters and filters["state"] not in State.values:
        raise ValidationFailed({"state": [f"Must be one of {', '.join(State.values)}."]})
    if "queue" in filters:
        filters["queue"] = parsing.queue_name(filters["queue"])
    if "\x00" in filters.get("type", ""):  # PostgreSQL refuses U+0000 in a query: a 503
        raise ValidationFailed({"type": ["Not a job type name."]})
    if "\x00" in filters.get("key", "") or len(filters.get("key", "")) > MAX_KEY:
        raise ValidationFailed({"key": ["Not a key: 1 to 128 characters, no U+0000."]})
    unique_key = filters.get("unique_key", "")
    if "\x00" in unique_key or len(unique_key) > MAX_UNIQUE_KEY:
        raise ValidationFailed(
            {"unique_key": [f"Not a unique key: 1 to {MAX_UNIQUE_KEY} characters, no U+0000."]}
        )
    if "workflow" in filters:
        workflow = parsing.task_id(filters.pop("workflow"))  # ids of one shape
        if workflow is None:
            raise ValidationFailed({"workflow": ["Not a workflow id this API gave out."]})
        filters["workflow_id"] = workflow
    # The page's ids and sizes first, then whole only the tasks it can carry: a page of large
    # tasks is not read whole to be cut.
    sized = tasks.filter(**filters).only("pk").annotate(stored=_STORED)
    page, next_url = parsing.newest_first(request, sized, DEFAULT_LIMIT, MAX_LIMIT)
    ids = _within_answer(page)
    found = {t.pk: t for t in _cut(Task.objects.filter(pk__in=ids), IN_LISTS)}
    shown = [found[pk] for pk in ids if pk in found]
    results = up_to_answer_size(_with_errors(shown, IN_LISTS))
    if results and shown[len(results) - 1].pk != page[-1].pk:
        # Cut short of its `limit` by size: the next page goes on after its last item.
        next_url = parsing.page_after(request, shown[len(results) - 1].pk)
    return Response({"results": results, "next": next_url})

"""GET /jobs, /jobs/{id} and /dlq: newest first, keyset-paginated so a walk sees each task once."""
from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import urlencode

from rest_framework.request import Request
from rest_framework.response import Response

from broker.api import parsing
from broker.api.errors import ValidationFailed
from broker.api.representation import listed_task
from broker.exceptions import TaskNotFound
from broker.models import Task, TaskError
from broker.states import State
from contract.limits import DEFAULT_PAGE_SIZE as DEFAULT_LIMIT
from contract.limits import MAX_PAGE_SIZE as MAX_LIMIT


def _with_errors(tasks: list[Task]) -> list[dict[str, Any]]:
    errors: dict[int, list[TaskError]] = defaultdict(list)
    for error in TaskError.objects.filter(task_id__in=[t.pk for t in tasks]).order_by("id"):
        errors[error.task_id].append(error)
    return [listed_task(t, errors[t.pk]) for t in tasks]


def one_task(pk: int) -> dict[str, Any]:
    task = Task.objects.filter(pk=pk).first()
    if task is None:
        raise TaskNotFound("No such task.")
    return _with_errors([task])[0]


def list_tasks(
    request: Request, tasks: Any, allow_filters: tuple[str, ...] = ("state", "queue", "type")
) -> Response:
    params = request.GET
    filters: dict[str, Any] = {}
    for name in allow_filters:
        value = params.get(name)
        if value:
            filters[name] = value
    if "state" in filters and filters["state"] not in State.values:
        raise ValidationFailed({"state": [f"Must be one of {', '.join(State.values)}."]})
    if "queue" in filters:
        filters["queue"] = parsing.queue_name(filters["queue"])
    if "\x00" in filters.get("type", ""):  # PostgreSQL refuses U+0000 in a query: a 503
        raise ValidationFailed({"type": ["Not a job type name."]})
    limit = parsing.query_int(params, "limit", DEFAULT_LIMIT, minimum=1, cap=MAX_LIMIT)
    cursor = params.get("cursor")
    qs = tasks.filter(**filters).order_by("-pk")
    if cursor:
        after = parsing.task_id(cursor)
        if after is None:
            raise ValidationFailed({"cursor": ["Not a cursor this API gave out."]})
        qs = qs.filter(pk__lt=after)
    page = list(qs[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    next_url = None
    if more and page:
        query = {k: v for k, v in params.items() if k != "cursor"}
        query["cursor"] = str(page[-1].pk)
        next_url = request.build_absolute_uri(f"{request.path}?{urlencode(query)}")
    return Response({"results": _with_errors(page), "next": next_url})

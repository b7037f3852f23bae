"""The one rule every API view asks: may this request do this, on this queue or task?

A view class declares, per method, the action class its route needs (`BrokerView.grants`):
`"produce"` and the like are checked by the view against the queue or task it names, with the
functions here; `"read:*"` (the action on every queue) is checked before the view runs; a method
without a declaration is refused. A refusal is a 403 naming the action and the queue, except
where it would tell a token of another tenant's task: a task or workflow in queues none of its
grants names is answered exactly as an unknown id (404; in `after`, a 400).

Routes of the contract not served yet declare theirs when they come (a test generated from the
URL configuration fails for a method without one): `POST /events` "produce" (an event releases
only tasks of queues its token may produce to), `GET /events` "read:*", `POST /jobs/{id}/wait`
"consume" (`require_task`, as ack).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from typing import Any

from django.db.models import Q, QuerySet
from django.http import HttpRequest

from broker.exceptions import BrokerError, InvalidTaskError, TaskNotFound
from broker.queue.base import NewTask, QueuePatterns
from broker.tokens.grants import EVERY, FULL, Access, is_literal

# Marks an idempotency key kept in one token's space (never sent by a client as such: a key of
# the shared space that starts with it can only come from a caller with every right).
_KEY_MARK = "\x1e"


class Forbidden(BrokerError):
    """This token may not do that."""

    status_code = 403


def of(request: Any) -> Access:
    """The request's Access (set by broker.api.middleware; FULL where no guard ran)."""
    access: Access = getattr(request, "broker_access", FULL)
    return access


def refuse(action: str, queue: str | None) -> Forbidden:
    """The 403 naming the action and the queue (`*`: every queue; None: any queue, a list's)."""
    where = (
        "any queue" if queue is None else "every queue" if queue == EVERY else f"queue {queue!r}"
    )
    return Forbidden(f"This token has no grant to {action} on {where}.")


def require(request: Any, action: str, queue: str) -> None:
    """403 unless the request may do `action` on `queue`."""
    if not of(request).may(action, queue):
        raise refuse(action, queue)


def require_everywhere(request: Any, action: str) -> None:
    """403 unless the request holds `action` on `*` (stats, metrics, types, ...)."""
    if not of(request).may_everywhere(action):
        raise refuse(action, EVERY)


def check_route(request: HttpRequest, declared: str | None) -> None:
    """BrokerView.initial: a method must declare its grant; `<action>:*` is checked here."""
    access = of(request)
    if access.everything or declared == "open":
        return
    if declared is None:
        raise Forbidden("This route grants nothing to access tokens.")
    action, _, where = declared.partition(":")
    if where == EVERY:
        require_everywhere(request, action)


def task_queue(access: Access, action: str, pk: int | None, missing: type[BrokerError]) -> None:
    """404 (`missing`) for a task none of the grants names; 403 when named but not for
    `action`. One query by key, only for a token without `action` on every queue."""
    if access.may_everywhere(action):
        return
    from broker.models import Task

    queue = None if pk is None else Task.objects.filter(pk=pk).values_list("queue").first()
    if queue is None or not access.knows(queue[0]):
        raise missing()
    if not access.may(action, queue[0]):
        raise refuse(action, queue[0])


def require_task(
    request: Any, action: str, pk: int | None, missing: type[BrokerError] = TaskNotFound
) -> None:
    task_queue(of(request), action, pk, missing)


def refused_tasks(
    request: Any, action: str, pks: Iterable[int | None], missing: type[BrokerError]
) -> dict[int | None, type[BrokerError] | Forbidden]:
    """For batches: each task id the request may not `action` → its refusal (`missing`, or a
    Forbidden); one query for all of them."""
    access = of(request)
    if access.may_everywhere(action):
        return {}
    from broker.models import Task

    wanted = [pk for pk in pks if pk is not None]
    queues = dict(Task.objects.filter(pk__in=wanted).values_list("pk", "queue"))
    refused: dict[int | None, type[BrokerError] | Forbidden] = {None: missing}
    for pk in wanted:
        queue = queues.get(pk)
        if queue is None or not access.knows(queue):
            refused[pk] = missing
        elif not access.may(action, queue):
            refused[pk] = refuse(action, queue)
    return refused


def _regex(pattern: str) -> str:
    """A grant's glob over queue names (`*`, `?`) as a regular expression both databases read
    alike (PostgreSQL's `~`, SQLite's REGEXP, which is Python's)."""
    return (
        "^"
        + "".join(
            ".*" if c == "*" else "." if c == "?" else "\\" + c if c in ".-" else c for c in pattern
        )
        + "$"
    )


def queues_q(patterns: list[str], field: str = "queue") -> Q:
    """Rows whose `field` matches one of `patterns`; none when there is none."""
    q = Q(pk__in=[])
    for pattern in patterns:
        q |= Q(**{f"{field}__regex": _regex(pattern)})
    return q


def listed_patterns(request: Any, action: str) -> list[str] | None:
    """A list's patterns (None: every queue); 403 for a token without `action` anywhere."""
    patterns = of(request).patterns(action)
    if patterns == []:
        raise refuse(action, None)
    return patterns


def visible(request: Any, tasks: QuerySet, action: str = "read") -> QuerySet:
    """`tasks` cut to the queues the request may `action` on (lists)."""
    patterns = listed_patterns(request, action)
    return tasks if patterns is None else tasks.filter(queues_q(patterns))


def enqueue_spec(request: Any, spec: NewTask) -> NewTask:
    """A new task as this request may make it: 403 unless it may produce to its queue; with a
    database token, stamped with its name and its idempotency key kept in its own space."""
    access = of(request)
    if not access.may("produce", spec.queue):
        raise refuse("produce", spec.queue)
    if access.token_id is None:
        return spec
    key = spec.idempotency_key
    return dataclasses.replace(
        spec,
        enqueued_by=access.name,
        idempotency_key=None if key is None else own_key(access.token_id, key),
    )


def own_key(token_id: int, key: str) -> str:
    """A token's idempotency key as stored: apart from every other token's and the shared
    space's. Readable (shown back without the mark), within the column's 300 characters."""
    if len(key) > 255:  # not a key a client may send; kept apart all the same
        key = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{_KEY_MARK}{token_id}{_KEY_MARK}{key}"


def shown_key(stored: str | None) -> str | None:
    """The idempotency key as its client sent it."""
    if stored is None or not stored.startswith(_KEY_MARK):
        return stored
    return stored.split(_KEY_MARK, 2)[2]


def check_after(request: Any, specs: list[NewTask], prefix: str = "{}.") -> None:
    """400 naming `after.i` as for an unknown id, for a task of a queue none of the grants names
    (`prefix` formats the item's index in a batch; "" for one task)."""
    access = of(request)
    if access.everything or not any(spec.after for spec in specs):
        return
    from broker.models import Task

    named = {pk for spec in specs for pk in spec.after}
    queues = dict(Task.objects.filter(pk__in=named).values_list("pk", "queue"))
    problems: dict[str, list[str]] = {}
    for n, spec in enumerate(specs):
        for i, pk in enumerate(spec.after):
            queue = queues.get(pk)
            if queue is not None and not access.knows(queue):
                problems[f"{prefix.format(n) if prefix else ''}after.{i}"] = ["No such task."]
    if problems:
        raise InvalidTaskError(problems)


def claim_scope(request: Any, queues: list[str] | None) -> list[str] | QueuePatterns | None:
    """The queues a claim may take from: those it names (403 naming the first not granted), or,
    naming none, the granted ones: their names, or patterns the claim resolves itself."""
    access = of(request)
    if queues is not None:
        for name in queues:
            if not access.may("consume", name):
                raise refuse("consume", name)
        return queues
    patterns = access.patterns("consume")
    if patterns is None:
        return None
    if not patterns:
        raise refuse("consume", EVERY)
    if all(is_literal(p) for p in patterns):
        return patterns
    return QueuePatterns(tuple(patterns), tuple(_regex(p) for p in patterns))


def screen_settles(
    request: Any, items: list[tuple[Any, ...]]
) -> tuple[list[tuple[Any, ...]], dict[int, Forbidden]]:
    """Acks or nacks (id first) as this request may settle them: a task it may not consume is
    settled as no task (its answer a 404, as for an unknown id), or, when a grant names the
    queue but not `consume`, answered 403: {index: refusal}."""
    refused = refused_tasks(request, "consume", [item[0] for item in items], TaskNotFound)
    if not refused:
        return items, {}
    screened: list[tuple[Any, ...]] = []
    forbidden: dict[int, Forbidden] = {}
    for i, item in enumerate(items):
        why = refused.get(item[0])
        if why is None:
            screened.append(item)
            continue
        screened.append((None, *item[1:]))
        if isinstance(why, Forbidden):
            forbidden[i] = why
    return screened, forbidden


def forbidden_answer(task_id: Any, why: Forbidden) -> dict[str, Any]:
    return {"id": task_id, "status": why.status_code, "error": why.message}


def visible_names(request: Any, rows: QuerySet, action: str, field: str = "name") -> QuerySet:
    """`rows` cut to those whose queue (`field`) the request may `action` on (GET /queues)."""
    patterns = listed_patterns(request, action)
    return rows if patterns is None else rows.filter(queues_q(patterns, field))


def require_queue(request: Any, action: str, name: str, missing: type[BrokerError]) -> None:
    """A route naming a queue: 404 (`missing`) when no grant names it, 403 without `action`."""
    access = of(request)
    if not access.knows(name):
        raise missing()
    if not access.may(action, name):
        raise refuse(action, name)


def require_workflow(request: Any, action: str, pk: int, missing: type[BrokerError]) -> None:
    """A workflow needs `action` on every step's queue: 404 (`missing`) when no grant names
    any of them, else 403 naming the first not granted."""
    access = of(request)
    if access.may_everywhere(action):
        return
    from broker.models import Task

    queues = sorted(set(Task.objects.filter(workflow_id=pk).values_list("queue", flat=True)))
    if not any(access.knows(q) for q in queues):
        raise missing()
    for name in queues:
        if not access.may(action, name):
            raise refuse(action, name)


def visible_workflows(request: Any, workflows: QuerySet) -> QuerySet:
    """Workflows every step of which is in a queue the request may read."""
    patterns = listed_patterns(request, "read")
    if patterns is None:
        return workflows
    from django.db.models import Exists, OuterRef

    from broker.models import Task

    outside = Task.objects.filter(workflow_id=OuterRef("pk")).exclude(queues_q(patterns))
    return workflows.exclude(Exists(outside))

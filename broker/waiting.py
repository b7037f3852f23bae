"""Why a task is not running: GET /jobs/{id}'s `waiting`, and the same on its admin page.

The reasons and their order are API.md's: parent_dead, blocked, event, delayed, retry_backoff,
queue_paused, queue_full, key_busy, key_full, rate_limited, no_workers, queued. Reads settings,
counter rows, dependency rows and claim notes; never a claim.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

from django.db.models import Count, Q, Sum

from broker.claimers import workers_seen
from broker.models import EventWait, KeyState, Queue, QueueCounter, Task
from broker.queue import dependencies, keyclaims, restricted
from broker.queue.base import current_time
from broker.states import State
from contract.limits import WORKERS_SEEN_S
from contract.wording import counted, nouned

REASONS = (
    "parent_dead", "blocked", "event", "delayed", "retry_backoff", "queue_paused", "queue_full",
    "key_busy", "key_full", "rate_limited", "no_workers", "queued",
)  # fmt: skip
WAITING_STATES = (State.READY, State.DELAYED, State.BLOCKED)


def _stamp(value: datetime) -> str:
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def explain(task_id: int) -> dict[str, Any] | None:
    """`waiting` for a ready, delayed or blocked task: {"reason", "detail", ...}; else None."""
    row = (
        Task.objects.filter(pk=task_id, state__in=WAITING_STATES)
        .values_list("state", "queue", "priority", "available_at", "attempts", "key", "key_wait")
        .first()
    )
    if row is None:
        return None
    state, queue_name, priority, available_at, attempts, key, key_wait = row
    if state == State.BLOCKED:
        return _blocked(task_id)
    if state == State.DELAYED:
        if attempts:
            return {"reason": "retry_backoff", "until": _stamp(available_at),
                    "detail": f"Attempt {attempts} failed; the retry waits until "
                              f"{_stamp(available_at)}."}  # fmt: skip
        return {
            "reason": "delayed",
            "until": _stamp(available_at),
            "detail": f"Enqueued with a delay: it becomes ready at {_stamp(available_at)}.",
        }
    settings = Queue.objects.filter(name=queue_name).first()
    return _held(queue_name, settings, task_id, key, key_wait) or _queued(
        task_id, queue_name, priority, available_at, key, settings
    )


def _blocked(task_id: int) -> dict[str, Any]:
    """parent_dead when a task it waits for is dead (requeue it), else blocked; with every task
    it names finished, event (what it waits for, and until when)."""
    on, dead = dependencies.waiting_on(task_id)
    if not on:
        wait = EventWait.objects.filter(task_id=task_id).first()
        if wait is not None:
            return _event(wait)
    shown = ", ".join(map(str, on))
    if dead:
        return {"reason": "parent_dead", "on": [str(pk) for pk in on],
                "detail": f"Waits for {nouned(len(on), 'task')} {shown}, of which "
                          f"{nouned(len(dead), 'task')} "
                          f"{', '.join(map(str, dead))} went to the dead-letter queue: requeued "
                          "and done, it lets this one go."}  # fmt: skip
    return {"reason": "blocked", "on": [str(pk) for pk in on],
            "detail": f"Waits for {nouned(len(on), 'task')} {shown} to finish."}  # fmt: skip


def _event(wait: EventWait) -> dict[str, Any]:
    until = None if wait.deadline is None else _stamp(wait.deadline)
    then = (
        "for ever" if until is None
        else f"until {until}, when it is {'cancelled' if wait.on_timeout == 'cancel' else 'run'}"
    )  # fmt: skip
    return {
        "reason": "event",
        "event": wait.name,
        "key": wait.key,
        "until": until,
        "detail": f"Waits for the event {wait.name!r} with key {wait.key!r}, {then}.",
    }


def _held(
    queue_name: str, settings: Queue | None, task_id: int, key: str | None, key_wait: bool
) -> dict[str, Any] | None:
    """The first reason the queue's settings, its key or its workers give a ready task, if any."""
    if settings is not None and settings.paused:
        return {
            "reason": "queue_paused",
            "detail": f"The queue {queue_name!r} is paused: claims take nothing from it.",
        }
    if settings is not None and settings.max_in_flight is not None:
        in_flight = (
            QueueCounter.objects.filter(queue=queue_name).aggregate(n=Sum("handed_out"))["n"] or 0
        )
        if in_flight >= settings.max_in_flight:
            return {"reason": "queue_full",
                    "detail": f"The queue {queue_name!r} has {counted(in_flight, 'task')} handed "
                              f"out, its max_in_flight is {settings.max_in_flight}."}  # fmt: skip
    keyed = _keyed(queue_name, settings, task_id, key, key_wait)
    if keyed is not None:
        return keyed
    if settings is not None and settings.rate_per_s is not None:
        tokens = restricted.bucket(
            settings.rate_per_s, settings.tokens, settings.refilled_at, current_time()
        )
        if tokens < 1:
            return {
                "reason": "rate_limited",
                "detail": f"The queue {queue_name!r} hands out at most "
                f"{counted(settings.rate_per_s, 'task')} a second, and has just done so.",
            }
    if not workers_seen(queue_name, every=settings is None or not settings.made_by_sqs):
        return {"reason": "no_workers",
                "detail": f"No claim request that could take from {queue_name!r} came in the "
                          f"last {WORKERS_SEEN_S} s."}  # fmt: skip
    return None


def _keyed(
    queue_name: str, settings: Queue | None, task_id: int, key: str | None, key_wait: bool
) -> dict[str, Any] | None:
    """key_busy (ordered: an earlier task of its key is unfinished), then key_full."""
    if key_wait:
        behind = dependencies.key_predecessor(task_id)
        if behind is not None:
            detail = (
                f"Task {behind} of its key {key!r} is not finished: the queue is ordered, "
                "one task of a key at a time."
            )
            return {"reason": "key_busy", "behind": str(behind), "detail": detail}
    if settings is not None and settings.key_max_in_flight is not None and key is not None:
        held = Task.objects.filter(queue=queue_name, key=key, state=State.HANDED_OUT).count()
        if held >= settings.key_max_in_flight:
            cap = settings.key_max_in_flight
            return {"reason": "key_full",
                    "detail": f"Its key {key!r} has {counted(held, 'task')} handed out, the "
                              f"queue's key_max_in_flight is {cap}."}  # fmt: skip
    return None


def _queued(
    task_id: int,
    queue_name: str,
    priority: int,
    available_at: datetime,
    key: str | None,
    settings: Queue | None,
) -> dict[str, Any]:
    """`queued`, with how many ready tasks of the queue are claimed before this one."""
    older = Q(priority=priority, available_at__lt=available_at) | Q(
        priority=priority, available_at=available_at, pk__lt=task_id
    )
    ready = Task.objects.ready([queue_name])
    if settings is None or not (settings.fair or settings.key_max_in_flight is not None):
        ahead = ready.filter(Q(priority__lt=priority) | older).count()
    else:
        ahead = _ahead_by_key(ready, task_id, priority, older, key, settings)
    detail = (
        "Next in line: the next claim of its queue takes it."
        if ahead == 0
        else f"{counted(ahead, 'ready task')} of its queue {nouned(ahead, 'goes', 'go')} first."
    )
    return {"reason": "queued", "ahead": ahead, "detail": detail}


def _ahead_by_key(
    ready: Any, task_id: int, priority: int, older: Q, key: str | None, settings: Queue
) -> int:
    """`ahead` where keys decide the order (keyclaims): a key held at key_max_in_flight gives
    only its free slots before this task; in a fair queue, the tasks of this task's priority go
    round by round over the keys in their served order, so each other key gives at most as many
    as this task's key has turns before it (keyless tasks are one key of their own, "")."""

    def by_key(rows: Any) -> Counter[str]:
        per_key = rows.order_by().values_list("key").annotate(n=Count("id"))
        return Counter({k or "": n for k, n in per_key})

    own = key or ""
    room: dict[str, float] = defaultdict(lambda: float("inf"))
    if settings.key_max_in_flight is not None:
        for k, n in keyclaims.in_flight(settings.name).items():
            room[k] = max(0, settings.key_max_in_flight - n)
    if not settings.fair:
        before = by_key(ready.filter(Q(priority__lt=priority) | older))
        return sum(n if k in ("", own) else int(min(n, room[k])) for k, n in before.items())
    higher = by_key(ready.filter(priority__lt=priority))
    same = by_key(ready.filter(priority=priority).exclude(pk=task_id))
    mine = ready.filter(older).filter(**({"key": key} if key else {"key__isnull": True})).count()
    keys = KeyState.objects.filter(queue=settings.name).order_by("served_at", "key")
    place = {k: n for n, k in enumerate(keys.values_list("key", flat=True))}
    position = place.get(own, -1)  # no row yet: first in line
    ahead = mine
    for k in set(higher) | set(same):
        limit = room[k] if k else float("inf")
        took = min(higher[k], limit)
        if k == own:
            ahead += int(took)
            continue
        turns = mine + (1 if place.get(k, len(place)) < position else 0)
        ahead += int(took + min(same[k], turns, limit - took))
    return ahead

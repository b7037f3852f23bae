"""Dependencies: a task enqueued `after` others starts blocked, and is released (→ ready, or →
delayed for its delay_ms) in the transaction of the move that finishes the last of them.

A dependency row (child, parent) is satisfied once, when the parent finishes as the child's
policy wants: `done`, or under "finished" also `dead` or `cancelled`; the child's `blockers`
counts the rows not yet satisfied, and the move that takes it to 0 releases the child. Under
"done", a cancelled parent cancels the child, and so on down every chain of "done" waits; a dead
one leaves it blocked until the parent is requeued and done.

The PostgreSQL settles (sql.ACK_ONE, sql.SETTLE) release in their one statement; the moves made
in Python (cancel, reclaim, release, SQLite's settle) call after_finish() inside their transaction.

Lock order: every move of a graph locks its tasks in id order, so that no two requests on one
graph deadlock, whatever mix of enqueues, settles, cancels and requeues meets on it, and each
locks its tasks before the counter rows its move bumps.
- An enqueue locks the tasks it names in one pass (bumping their `children`) before it reads
  their states, so a parent that finishes meanwhile either sees the new row or makes the enqueue
  wait and read it finished.
- A settle locks its tasks, then the tasks waiting for them, in its one statement when that is
  in order (each of those comes after every task it settles: a task enqueued after another
  does, a workflow step listed before the step it waits for does not) and no enqueue named one
  of them meanwhile; else it locks them all in one pass first and settles in a second statement
  (sqlrelease.in_one_statement, sql.LOCK_SETTLED): answered at once however many enqueues race.
- A cancel (one task, many, a workflow's steps, a discard from the DLQ) first locks in one pass
  everything its cascade may move or count down (lock_for_cancel).
- A requeue locks the dead tasks in one pass; it moves no other task.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import F, Q

from broker import observe
from broker.exceptions import InvalidTaskError
from broker.models import Dependency, KeyState, Task
from broker.queue import counters
from broker.queue.counters import Move
from broker.queue.keys import UNFINISHED
from broker.states import TRANSITIONS, State
from broker.wakeup import announce

FINISHED = "finished"  # the after_policy that counts any end, not only done
_EVENTS = ("unblock", "unblock_delayed", "cancel")
_BLOCKED = State.BLOCKED.value
_READY, _DELAYED = TRANSITIONS["unblock"][1], TRANSITIONS["unblock_delayed"][1]
_CANCELLED = TRANSITIONS["cancel"][1]


@dataclass(frozen=True, slots=True)
class Parent:
    """A task a delivered one waited for, as the delivery shows it."""

    pk: int
    state: str
    result: str | None  # JSON text


def satisfies(parent_state: str, finished_ok: bool) -> bool:
    """Whether a parent in this state lets the child go (finished_ok: its policy is finished)."""
    return parent_state == State.DONE or (
        finished_ok and parent_state in (State.DEAD, State.CANCELLED)
    )


# -- enqueue ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Blocking:
    """What an enqueue with `after` starts as: blocked on `blockers` of its parents, or not."""

    blockers: int
    satisfied: tuple[bool, ...]  # per item of `after`


_BUMP_IN_ORDER = (
    "UPDATE broker_task t SET children = t.children + 1 FROM (SELECT id FROM broker_task"
    " WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR UPDATE) AS p WHERE t.id = p.id"
)


def lock_parents(named: Iterable[int]) -> dict[int, str]:
    """Lock the tasks `named` (bumping their `children`) and read their states as committed now;
    an unknown id is left out. Call in the enqueue's transaction."""
    ids = sorted(set(named))
    # The row locks that finishing moves of a parent wait on, taken in id order (as every move
    # of a graph takes its locks: see the module docstring).
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_BUMP_IN_ORDER, {"ids": ids})
    else:
        Task.objects.filter(pk__in=ids).update(children=F("children") + 1)
    # A statement of its own: under READ COMMITTED it reads what committed while it waited.
    return dict(Task.objects.filter(pk__in=ids).values_list("pk", "state"))


def check(after: Sequence[int], policy: str, field: str) -> None:
    """Whether a task waiting for `after` could be enqueued now, as the enqueue would judge it,
    without locking or enqueuing anything (a schedule's job, checked when it is saved). Raises
    InvalidTaskError naming `<field>.2`."""
    states = dict(Task.objects.filter(pk__in=sorted(set(after))).values_list("pk", "state"))
    plan(after, policy, states, field)


def plan(after: Sequence[int], policy: str, states: Mapping[int, str], field: str) -> Blocking:
    """How a new task waiting for `after` under `policy` starts, given their `states`. Raises
    InvalidTaskError naming `<field>.2` when one is unknown (not in `states`) or when it could
    never run (a parent cancelled under "done")."""
    unknown = {f"{field}.{i}": ["No such task."] for i, pk in enumerate(after) if pk not in states}
    if unknown:
        raise InvalidTaskError(unknown)
    finished_ok = policy == FINISHED
    never = {
        f"{field}.{i}": ["This task is cancelled: under after_policy done, the new one could "
                         "never run."]
        for i, pk in enumerate(after)
        if states[pk] == State.CANCELLED and not finished_ok
    }  # fmt: skip
    if never:
        raise InvalidTaskError(never)
    satisfied = tuple(satisfies(states[pk], finished_ok) for pk in after)
    return Blocking(blockers=satisfied.count(False), satisfied=satisfied)


def add_edges(child: int, after: Sequence[int], policy: str, blocking: Blocking) -> None:
    """The dependency rows of a new task (call in the enqueue's transaction)."""
    finished_ok = policy == FINISHED
    Dependency.objects.bulk_create(
        Dependency(child_id=child, parent_id=pk, position=i, satisfied=ok, finished_ok=finished_ok)
        for i, (pk, ok) in enumerate(zip(after, blocking.satisfied, strict=True))
    )


# -- release and cascade --------------------------------------------------------------------


def after_finish(finished: Mapping[int, str], now: datetime) -> list[Move]:
    """The dependants of tasks that just finished (id → done, dead or cancelled; locked by the
    caller's transaction): satisfy their rows, release those with nothing left to wait for,
    cancel those that waited under "done" for a cancelled one, and so on down. Counts the moves
    and wakes claimers of released ready tasks; returns the moves."""
    moves: list[Move] = []
    frontier = dict(finished)
    while frontier:
        frontier = _one_level(frontier, now, moves)
    if moves:
        counters.bump(counters.count_moves(_EVENTS, moves))
        for new, n in Counter(new for _, _, new in moves).items():
            observe.moved(_BLOCKED, new, count=n)
    return moves


def _one_level(parents: Mapping[int, str], now: datetime, moves: list[Move]) -> dict[int, str]:
    """One generation of after_finish: the children of `parents`; the ones it cancelled."""
    _hand_over_turns(parents)
    rows = Dependency.objects.filter(parent_id__in=sorted(parents), satisfied=False).values_list(
        "pk", "child_id", "parent_id", "finished_ok", "key_order"
    )
    satisfied: list[int] = []
    counted: Counter[int] = Counter()
    turned: set[int] = set()  # an ordered key's next task: its turn came
    doomed: set[int] = set()
    for pk, child, parent, finished_ok, key_order in rows:
        if satisfies(parents[parent], finished_ok):
            satisfied.append(pk)
            if key_order:
                turned.add(child)
            else:
                counted[child] += 1
        elif parents[parent] == State.CANCELLED:
            doomed.add(child)
    if satisfied:
        Dependency.objects.filter(pk__in=satisfied).update(satisfied=True)
    children = sorted(set(counted) | doomed | turned)
    if not children:
        return {}
    held = (
        Task.objects.select_for_update()
        .filter(Q(state=_BLOCKED) | Q(key_wait=True), pk__in=children)
        .order_by("pk")
        .values_list("pk", "queue", "state", "blockers", "key_wait", "available_at", "created_at")
    )
    cancelled: dict[int, str] = {}
    updates: list[tuple[Any, ...]] = []
    woken: Counter[str] = Counter()
    for pk, queue, state, blockers, key_wait, available_at, created_at in held:
        waits = key_wait and pk not in turned
        if state == _BLOCKED and pk in doomed:
            updates.append((_CANCELLED, available_at, 0, False, pk))
            cancelled[pk] = _CANCELLED
            moves.append((queue, _BLOCKED, _CANCELLED))
        elif state == _BLOCKED and blockers <= counted[pk]:
            delay = available_at - created_at
            new = _DELAYED if delay > timedelta(0) else _READY
            updates.append((new, now + delay, 0, waits, pk))
            moves.append((queue, _BLOCKED, new))
            woken[queue] += new == _READY and not waits
        else:
            left = blockers - counted[pk] if state == _BLOCKED else blockers
            updates.append((state, available_at, left, waits, pk))
            woken[queue] += state == _READY and not waits
    _write(updates, now)
    announce(+woken)
    return cancelled


# What a cancel of `ids` may lock, locked in one pass in id order (lock_for_cancel): the tasks
# themselves, down every chain of "done" waits through tasks still blocked (those the cascade
# cancels), every task waiting for one of those (counted down, or given its key's turn), and the
# earlier tasks of their keys they wait for (hold_turns, _hand_over_turns).
_CANCEL_REACH = (
    "WITH RECURSIVE ended(id) AS (SELECT unnest(%(ids)s::bigint[])"
    " UNION SELECT d.child_id FROM broker_dependency d JOIN ended e ON d.parent_id = e.id"
    " JOIN broker_task c ON c.id = d.child_id"
    " WHERE NOT d.satisfied AND NOT d.finished_ok AND NOT d.key_order AND c.state = 'blocked')"
    " SELECT t.id FROM broker_task t WHERE t.id IN (SELECT id FROM ended"
    " UNION SELECT d.child_id FROM broker_dependency d JOIN ended e ON d.parent_id = e.id"
    " WHERE NOT d.satisfied"
    " UNION SELECT d.parent_id FROM broker_dependency d JOIN ended e ON d.child_id = e.id"
    " WHERE d.key_order AND NOT d.satisfied) ORDER BY t.id FOR UPDATE OF t"
)


def lock_for_cancel(task_ids: Sequence[int]) -> None:
    """First in a cancel's transaction (PostgreSQL): lock, in one pass in id order, every task
    the cancel of `task_ids` may move or count down (_CANCEL_REACH), so that it never takes a
    lock out of order, nor holds a counter row while it waits for one. A task enqueued after one
    of them meanwhile is newer than all of them: its lock, taken later by the cascade, is still
    in order."""
    if connection.vendor != "postgresql" or not task_ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(_CANCEL_REACH, {"ids": sorted(set(task_ids))})


def hold_turns(task_ids: Sequence[int]) -> None:
    """Before locking tasks a cancel may end: lock the tasks that those of them still waiting
    for their key's turn wait for (bumping `children`, as an enqueue does), parent first as the
    settles lock, so that after_finish can hand their place in line over (_hand_over_turns)."""
    ahead = sorted(
        set(
            Dependency.objects.filter(
                child_id__in=list(task_ids), key_order=True, satisfied=False
            ).values_list("parent_id", flat=True)
        )
    )
    if ahead:
        list(Task.objects.select_for_update().filter(pk__in=ahead).order_by("pk").values("pk"))
        Task.objects.filter(pk__in=ahead).update(children=F("children") + 1)


def _hand_over_turns(finished: Mapping[int, str]) -> None:
    """A task of an ordered queue that ended while still waiting for its turn (cancelled, or
    cancelled with its `after` parents) leaves its place in line to the task after it: while
    the task it waited for is unfinished, that one now waits for it, and the key's tail goes
    back to it when the ended one was last. (Else the next task's turn has come, as usual.)"""
    ahead = dict(
        Dependency.objects.filter(
            child_id__in=sorted(finished), key_order=True, satisfied=False
        ).values_list("child_id", "parent_id")
    )
    if not ahead:
        return
    hold_turns(list(ahead))  # locked already by a cancel (hold_turns); else now, and read fresh
    Dependency.objects.filter(child_id__in=list(ahead), key_order=True, satisfied=False).update(
        satisfied=True
    )
    live = set(
        Task.objects.filter(pk__in=set(ahead.values()), state__in=UNFINISHED).values_list(
            "pk", flat=True
        )
    )
    ahead = {ended: previous for ended, previous in ahead.items() if previous in live}
    behind = list(
        Dependency.objects.filter(
            parent_id__in=list(ahead), key_order=True, satisfied=False
        ).values_list("pk", "child_id", "parent_id")
    )
    for ended, previous in ahead.items():
        KeyState.objects.filter(tail=ended).update(tail=previous)
    if not behind:
        return
    Dependency.objects.filter(pk__in=[pk for pk, _, _ in behind]).delete()
    Dependency.objects.bulk_create(
        [Dependency(child_id=child, parent_id=ahead[parent], position=0, key_order=True,
                    finished_ok=True)
         for _, child, parent in behind],
        update_conflicts=True, unique_fields=["child", "parent", "key_order"],
        update_fields=["satisfied"],
    )  # fmt: skip


_UPDATE = (
    'UPDATE "broker_task" SET "state" = %s, "available_at" = %s, "blockers" = %s,'
    ' "key_wait" = %s, "updated_at" = %s WHERE "id" = %s'
)


def _write(updates: list[tuple[Any, ...]], now: datetime) -> None:
    ops = connection.ops
    at = ops.adapt_datetimefield_value(now)
    params = [
        (state, ops.adapt_datetimefield_value(available), blockers, key_wait, at, pk)
        for state, available, blockers, key_wait, pk in updates
    ]
    with connection.cursor() as cursor:
        cursor.executemany(_UPDATE, params)


# -- reading ----------------------------------------------------------------------------------


def parents_of(children: Iterable[int], results: bool = True) -> dict[int, list[Parent]]:
    """Per child, the tasks it named in `after`, in that order, with their state and result
    (None for every one with `results` False: they are not read)."""
    found: dict[int, list[Parent]] = defaultdict(list)
    columns = ("child_id", "parent_id", "parent__state", *(("parent__result",) * results))
    rows = (
        Dependency.objects.filter(child_id__in=list(children), key_order=False)
        .order_by("child_id", "position")
        .values_list(*columns)
    )
    for child, parent, state, *result in rows:
        found[child].append(Parent(parent, state, result[0] if result else None))
    return found


def waiting_on(child: int) -> tuple[list[int], list[int]]:
    """(the tasks a blocked child still waits for, in `after` order; those of them dead)."""
    rows = (
        Dependency.objects.filter(child_id=child, satisfied=False, key_order=False)
        .order_by("position")
        .values_list("parent_id", "parent__state")
    )
    on = [pk for pk, _ in rows]
    return on, [pk for pk, state in rows if state == State.DEAD]


def key_predecessor(child: int) -> int | None:
    """The earlier task of its key an ordered queue's task waits for (None: none)."""
    pk: int | None = (
        Dependency.objects.filter(child_id=child, satisfied=False, key_order=True)
        .values_list("parent_id", flat=True)
        .first()
    )
    return pk

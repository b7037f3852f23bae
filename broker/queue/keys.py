"""Keys: a task's `key` (a tenant, customer or entity) and the three queue settings over it.

- `ordered`: per key, one task at a time, in enqueue order. Each keyed task enqueued into an
  ordered queue waits for the key's previous task (its KeyState `tail`) while that one is
  unfinished: it is stored with `key_wait` and a Dependency row (key_order) on the previous
  task, and the move that finishes that one (ack, nack or reclaim to dead, cancel: any end)
  clears it, in the same transaction, as a release clears `after` (broker.queue.dependencies).
  The claim indexes hold only tasks without `key_wait`, so claims never see a task whose turn
  has not come, and a key's backlog costs them nothing. Turned on over a busy queue (order()):
  the tasks there line up, those handed out first, behind the queue's switch lock (SWITCH_LOCK).
- `fair` and `key_max_in_flight`: decided when claiming (broker.queue.keyclaims), under the
  queue's row lock.

KeyState rows (one per queue and key; keyless tasks are key "") are upserted by every enqueue
of a keyed task (a no-op update: it holds the row's lock to its commit, so the sweeper's prune of
idle keys never drops the row of a key being enqueued) and pruned by the sweeper once a key has
no live task.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.models import Exists, F, OuterRef, Q

from broker.models import Dependency, KeyState, Queue, Task
from broker.queue.base import current_time
from broker.states import State
from broker.wakeup import announce

# A key never served has served_at = when it appeared minus this: before every key served (a
# real time), and among the others by age, as a claim takes the oldest first.
UNSERVED_LEAD = timedelta(days=1000 * 365)
KEYLESS = ""  # the one key of the tasks without one
# How long an idle key's row outlives its last hand-out. A key back sooner keeps its place in
# a fair round; its row pruned, it would count as never served and go before every key with a
# backlog (a tenant sending one task at a time would always jump the queue). Long after, a key
# served that long ago comes before the keys served since anyway.
SERVED_KEEP = timedelta(minutes=10)
UNFINISHED = (State.READY, State.HANDED_OUT, State.DELAYED, State.BLOCKED)
_UPSERT = (
    'INSERT INTO "broker_keystate" ("queue", "key", "served_at") VALUES {rows}'
    ' ON CONFLICT ("queue", "key") DO UPDATE SET "served_at" = "broker_keystate"."served_at",'
    ' "asleep_until" = NULL'  # a key asleep has a task now: woken (see sleep)
    ' RETURNING "queue", "key", "tail"'
)
# Whether a queue is ordered is read by each keyed enqueue (and requeue), and turning `ordered`
# on or off lines up (or frees) the tasks already there: on PostgreSQL an enqueue in flight that
# read the queue as unordered would commit a task that the change, which read the tasks before
# that commit, never lined up. So each queue has a switch lock (an advisory lock keyed by
# SWITCH_LOCK and the name's hash): every keyed enqueue takes it shared, in the statement that
# holds its keys' rows, before it reads the setting, until its commit; a change takes it alone
# (lock_switch()). A change waits for the enqueues in flight, and an enqueue behind a change
# reads what it made. SQLite needs none: its IMMEDIATE transactions take turns from BEGIN.
SWITCH_LOCK = 0x0B5E
_LOCKED_UPSERT = (
    "WITH switch AS MATERIALIZED (SELECT count(pg_advisory_xact_lock_shared(%s, hashtext(g)))"
    " AS n FROM (SELECT DISTINCT unnest(%s::text[]) AS g ORDER BY 1) AS o)"
    ' INSERT INTO "broker_keystate" ("queue", "key", "served_at")'
    " SELECT v.q, v.k, v.s FROM (VALUES {rows}) AS v(q, k, s) CROSS JOIN switch"
    ' ON CONFLICT ("queue", "key") DO UPDATE SET "served_at" = "broker_keystate"."served_at",'
    ' "asleep_until" = NULL'  # as _UPSERT's
    ' RETURNING "queue", "key", "tail"'
)


def hold(pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int | None]:
    """Upsert and lock the KeyState rows of (queue, key) pairs, in one lock order, after their
    queues' switch locks, shared (PostgreSQL); each pair's tail (the last task enqueued for it
    in an ordered queue). Call in the enqueue's transaction, before reading which queues are
    ordered."""
    # A new key's stamp: in the order the batch names keys (a microsecond apart), then locked
    # in one order.
    first_seen = {pair: n for n, pair in reversed(list(enumerate(pairs)))}
    pairs = sorted(first_seen)
    if not pairs:
        return {}
    base = unserved(current_time())
    adapt = connection.ops.adapt_datetimefield_value
    params: list[object] = []
    statement = _UPSERT
    if connection.vendor == "postgresql":
        statement = _LOCKED_UPSERT
        params += [SWITCH_LOCK, sorted({queue for queue, _ in pairs})]
    for queue, key in pairs:
        params += [queue, key, adapt(base + timedelta(microseconds=first_seen[queue, key]))]
    with connection.cursor() as cursor:
        cursor.execute(statement.format(rows=", ".join(["(%s, %s, %s)"] * len(pairs))), params)
        return {(queue, key): tail for queue, key, tail in cursor.fetchall()}


def lock_switch(queue: str) -> None:
    """Take the queue's switch lock alone (SWITCH_LOCK) until this transaction ends: once the
    keyed enqueues in flight have committed. Call before reading the tasks that a change of
    `ordered` moves."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [SWITCH_LOCK, queue])


def unserved(appeared: datetime) -> datetime:
    """served_at of a key never served that appeared (its oldest task enqueued) at `appeared`."""
    return appeared - UNSERVED_LEAD


def ordered_queues(names: set[str]) -> set[str]:
    return set(Queue.objects.filter(name__in=names, ordered=True).values_list("name", flat=True))


class Line:
    """The enqueues of one transaction into ordered queues: for each new keyed task, the task
    it waits for (the key's unfinished tail, or an earlier task of the same batch)."""

    def __init__(self, tails: dict[tuple[str, str], int | None]) -> None:
        """tails: hold()'s answer for the pairs of ordered queues only."""
        self._tails: dict[tuple[str, str], int | Task | None] = dict(tails)
        named = [t for t in tails.values() if t is not None]
        # The tails' rows first (bumping `children`: the lock a settle of one waits on), then
        # their states, read by a statement of its own: what committed while we waited.
        Task.objects.filter(pk__in=named).update(children=F("children") + 1)
        live = Task.objects.filter(pk__in=named, state__in=UNFINISHED)
        self._unfinished = set(live.values_list("pk", flat=True))
        self.waits: list[tuple[Task, int | Task]] = []

    def join(self, row: Task) -> None:
        """Put a row at the end of its key's line."""
        pair = (row.queue, row.key or KEYLESS)
        previous = self._tails.get(pair)
        if isinstance(previous, Task) or (previous is not None and previous in self._unfinished):
            row.key_wait = True
            if isinstance(previous, Task):
                previous.children += 1
            self.waits.append((row, previous))
        self._tails[pair] = row

    def close(self) -> None:
        """After the rows are saved: their key_order rows, and each key's new tail."""
        # A requeued task may wait again for a task it waited for before: that row is reused.
        Dependency.objects.bulk_create(
            [Dependency(child_id=row.pk, parent_id=p if isinstance(p, int) else p.pk, position=0,
                        key_order=True, finished_ok=True)
             for row, p in self.waits],
            update_conflicts=True, unique_fields=["child", "parent", "key_order"],
            update_fields=["satisfied"],
        )  # fmt: skip
        for (queue, key), tail in self._tails.items():
            if isinstance(tail, Task):
                KeyState.objects.filter(queue=queue, key=key).update(tail=tail.pk)


def line_up(rows: Sequence[Task]) -> Line | None:
    """Before saving new rows: hold the KeyState rows of their keys, and in ordered queues make
    each keyed row wait for its key's previous task. None when no row has a key; else call
    .close() once the rows are saved."""
    keyed = [row for row in rows if row.key is not None]
    if not keyed:
        return None
    tails = hold([(row.queue, row.key or KEYLESS) for row in keyed])
    ordered = ordered_queues({row.queue for row in keyed})
    line = Line({pair: tail for pair, tail in tails.items() if pair[0] in ordered})
    for row in keyed:
        if row.queue in ordered:
            line.join(row)
    return line


def requeued(pks: Sequence[int]) -> None:
    """Tasks requeued out of the DLQ (now ready): their keys' KeyState rows are upserted (the
    sweeper may have pruned a row while its key had only dead tasks, and a fair queue's claims
    walk the rows: a key without one would never be served), and in ordered queues they join
    the end of their key's line: a key's tasks released since it died go first. Call in the
    requeue's transaction."""
    rows = list(
        Task.objects.filter(pk__in=pks, key__isnull=False)
        .order_by("pk")
        .only("pk", "queue", "key", "children")
    )
    if not rows:
        return
    tails = hold([(row.queue, row.key or KEYLESS) for row in rows])
    ordered = ordered_queues({row.queue for row in rows})
    rows = [row for row in rows if row.queue in ordered]
    if not rows:
        return
    ours = {row.pk for row in rows}
    line = Line(
        {pair: None if tail in ours else tail for pair, tail in tails.items() if pair[0] in ordered}
    )
    _line_up_saved(line, rows)


def order(queue: str) -> int:
    """The queue becomes ordered: its unfinished keyed tasks line up per key, as if enqueued into
    it. Each key's tasks handed out already keep their leases and go first, all of them holding
    the key: each waits for the one before it (their `key_wait` set, though handed out), so the
    key's next task goes only once every one of them has ended (one that ends while an earlier
    one is still out hands its place over: dependencies._hand_over_turns). Then the others, in
    enqueue order. Returns how many now wait. Call in the settings change's transaction."""
    lock_switch(queue)  # every keyed enqueue of the queue in flight commits first
    live = Task.objects.filter(queue=queue, key__isnull=False, state__in=UNFINISHED)
    pairs = [(queue, key) for key in live.order_by().values_list("key", flat=True).distinct()]
    if not pairs:
        return 0
    hold(pairs)
    # Locked in id order, as settles lock, and read as they are once locked: a task acked
    # meanwhile is not lined up (what waited for it would wait for ever); claims skip these.
    rows = list(
        live.select_for_update().order_by("pk").only("pk", "queue", "key", "state", "children")
    )
    rows.sort(key=lambda row: row.state != State.HANDED_OUT)  # stable: by id within each part
    return _line_up_saved(Line(dict.fromkeys(pairs)), rows)


def _line_up_saved(line: Line, rows: Sequence[Task]) -> int:
    """Join rows already saved to `line`, in order, and write what joining them changed: their
    key_wait, the `children` of the rows they wait for, the key_order rows and the tails.
    Returns how many now wait."""
    for row in rows:
        line.join(row)
    Task.objects.filter(pk__in=[row.pk for row, _ in line.waits]).update(key_wait=True)
    # An earlier row of these, saved already (a tail named by pk was bumped by Line itself).
    # Each task is at most one other's previous: one statement bumps them all.
    ahead = [previous.pk for _, previous in line.waits if isinstance(previous, Task)]
    Task.objects.filter(pk__in=ahead).update(children=F("children") + 1)
    # A task handed out that waits (order()) counts as waited for, so that every move that
    # ends it, whatever waits for it, hands its place in line over (even the tail's place).
    out = [row.pk for row, _ in line.waits if row.state == State.HANDED_OUT]
    if out:
        Task.objects.filter(pk__in=out).update(children=F("children") + 1)
    line.close()
    return len(line.waits)


def unorder(queue: str) -> int:
    """The queue stops being ordered: every task waiting for its turn is claimable at once."""
    lock_switch(queue)  # an enqueue in flight that read the queue as ordered commits first
    waiting = Task.objects.filter(queue=queue, key_wait=True)
    # The waiting tasks and those they wait for locked first, in id order, as settles lock
    # them: a settle locks its tasks, then their dependency rows, then their dependants.
    ahead = Dependency.objects.filter(child__in=waiting, key_order=True, satisfied=False)
    list(
        Task.objects.select_for_update()
        .filter(Q(pk__in=waiting.values("pk")) | Q(pk__in=ahead.values("parent_id")))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    Dependency.objects.filter(child__in=waiting, key_order=True, satisfied=False).update(
        satisfied=True
    )
    freed: int = waiting.update(key_wait=False)
    if freed:
        announce({queue: freed})
    return freed


# "For ever" as a time Python reads (PostgreSQL's 'infinity' is no datetime).
NEVER = datetime(9999, 1, 1, tzinfo=UTC)
_prune_after = 0  # the KeyState id the sweeper's next prune starts after (per process)
_sleep_after = 0  # and its next sleep

# Keys with nothing claimable and nothing that can become so but their delayed tasks (none
# ready, handed out or blocked) sleep until the first of those is due, or for ever (NEVER)
# without any: a fair claim's rounds walk only the keys awake (keystate_awake_idx), so keys
# parked for days, or served and idle for SERVED_KEEP, cost its walk nothing. Only an enqueue
# or a requeue gives such a key a claimable task before then, and both upsert its row (hold),
# which wakes it: the xmin guard skips a row upserted since this statement's snapshot (it waits
# for that writer, then sees a new row version), so a key is never put to sleep over a task it
# was given meanwhile. A delayed task is promoted at its time or later; the first fair claim
# after that time wakes the key (keyclaims.PREPARE). The keyless key "" never sleeps, nor a key
# with a pending unique task (broker.queue.unique): a debounce may bring its time forward.
_SLEEP = (
    "WITH walked AS (SELECT id, queue, key, xmin AS seen FROM broker_keystate"
    " WHERE id > %(after)s AND asleep_until IS NULL AND key <> '' ORDER BY id LIMIT %(limit)s),"
    " idle AS (SELECT w.id, w.seen, (SELECT min(t.available_at) FROM broker_task t"
    " WHERE t.queue = w.queue AND t.key = w.key AND t.state = 'delayed') AS due FROM walked w"
    " WHERE NOT EXISTS (SELECT 1 FROM broker_task t WHERE t.queue = w.queue AND t.key = w.key"
    " AND (t.state IN ('ready', 'handed_out', 'blocked')"
    " OR (t.unique_key IS NOT NULL AND t.claimed_at IS NULL)))),"
    " slept AS (UPDATE broker_keystate k SET asleep_until = coalesce(i.due, %(never)s)"
    " FROM idle i WHERE k.id = i.id AND k.xmin = i.seen AND k.asleep_until IS NULL RETURNING 1)"
    " SELECT (SELECT max(id) FROM walked), (SELECT count(*) FROM walked),"
    " (SELECT count(*) FROM slept)"
)


def sleep(limit: int = 1000, batches: int = 5) -> int:
    """Put to sleep the keys with nothing claimable that only a due time, an enqueue or a
    requeue can wake (see _SLEEP): up to `batches` statements of `limit` awake rows, walked by
    id, round and round (the sweeper, beside prune: 5,000 keys a tick, so a burst of 10,000
    idle keys sleeps within a few seconds, and a queue whose keys all have work costs a few
    milliseconds a tick). PostgreSQL only: SQLite's fair claims walk every key anyway.
    Returns how many went to sleep."""
    global _sleep_after
    if connection.vendor != "postgresql":
        return 0
    total = 0
    with connection.cursor() as cursor:
        for _ in range(batches):
            cursor.execute(_SLEEP, {"after": _sleep_after, "limit": limit, "never": NEVER})
            last, walked, slept = cursor.fetchone()
            _sleep_after = last if walked == limit else 0
            total += slept
            if walked < limit:
                break  # round the table: the next tick starts again
    return int(total)


def prune(limit: int = 500) -> int:
    """Delete the KeyState rows of keys with no live task and no hand-out for SERVED_KEEP (the
    sweeper): `limit` rows a call, walked by id, round and round. Idle rows are found without a
    lock (a key being served has live tasks: fair claims never wait on this); only they are
    locked, skipping those an enqueue holds, and the delete, a statement of its own after the
    lock, re-checks against every task committed before it. The keyless row of a queue stays."""
    global _prune_after
    live = Task.objects.filter(queue=OuterRef("queue"), key=OuterRef("key"), state__in=UNFINISHED)
    with transaction.atomic():
        ids = list(
            KeyState.objects.filter(pk__gt=_prune_after)
            .exclude(key=KEYLESS)
            .order_by("pk")
            .values_list("pk", flat=True)[:limit]
        )
        _prune_after = ids[-1] if len(ids) == limit else 0
        idle = list(
            KeyState.objects.filter(pk__in=ids, served_at__lt=current_time() - SERVED_KEEP)
            .exclude(Exists(live))
            .values_list("pk", flat=True)
        )
        if not idle:
            return 0
        held = list(
            KeyState.objects.select_for_update(skip_locked=True)
            .filter(pk__in=idle)
            .values_list("pk", flat=True)
        )
        deleted: int = KeyState.objects.filter(pk__in=held).exclude(Exists(live)).delete()[0]
        return deleted

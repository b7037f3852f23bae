"""The dependants' release that a PostgreSQL settle carries in its one statement (broker.queue.sql):
dependency rows satisfied, blocked children counted down and released, an ordered key's next task
given its turn, their claimers woken, and what the counters and the log line read of it."""

from __future__ import annotations

from broker.wakeup import CHANNEL


# A settle of a task that others wait for (`children` > 0) runs in its one statement only when
# that is safe; else the item moves nothing and the caller settles it again in a transaction
# that locks first (sql.LOCK_SETTLED; dependencies: lock order). Safe means:
# - no enqueue named it after this statement's snapshot: such an enqueue bumped `children` (a
#   new row version, which the lock waits for and then reads), while the dependency rows below
#   are read in the snapshot and would miss its row. The snapshot's own version says which;
# - none of the tasks waiting for it has a lower id than `top` (the highest of the statement's
#   items): the statement locks its items, then their dependants, so every lock it takes is in
#   id order only when each dependant comes after every item. A workflow step listed before the
#   step it waits for is such a dependant.
# `%(locked)s`: the caller holds the locks already (the second run): both are true then.
# Neither run settles a task still waiting for its key's turn (`key_wait`: handed out when its
# queue was made ordered, behind another task of its key then out, keys.order): its end hands
# its place in line over, which the caller does in Python (lease._settle_in_line).
def in_one_statement(row: str, by_id: str, top: str) -> str:
    return (
        f"NOT {row}.key_wait AND ({row}.children = 0 OR %(locked)s OR ({row}.xmin = ("
        f"SELECT s.xmin FROM broker_task s WHERE s.id = {by_id}) AND NOT EXISTS (SELECT 1 FROM"
        f" broker_dependency k WHERE k.parent_id = {row}.id AND NOT k.satisfied"
        f" AND k.child_id < {top})))"
    )


# The second run's locks, in id order: the items' tasks and every task waiting for one of them.
# Each enqueue that names one of them has committed before this statement gets its lock (it held
# it), and none can name it after until this transaction ends: the settle that follows, a
# statement of its own, reads every dependency row.
LOCK_SETTLED = (
    "SELECT t.id FROM broker_task t WHERE t.id = ANY(%(ids)s::bigint[] || ARRAY("
    "SELECT d.child_id FROM broker_dependency d WHERE d.parent_id = ANY(%(ids)s::bigint[])"
    " AND NOT d.satisfied)) ORDER BY t.id FOR UPDATE OF t"
)


def release_after(moved: str) -> str:
    """CTEs that release the dependants of the rows in `moved` (id, n, children), in the settle's
    statement: their dependency rows satisfied (all of them for a task now done, those under
    "finished" and an ordered key's next task for a dead one), each blocked child's blockers
    counted down (none left: → ready, or → delayed for its delay_ms from now), and a key's next
    task given its turn (key_wait cleared). Children are locked in id order; a concurrent settle
    of another parent of the same child waits, then counts from what this one left (READ
    COMMITTED reads the locked row's newest version)."""
    return (
        ", sat AS (UPDATE broker_dependency d SET satisfied = true FROM"
        f" {moved} m WHERE m.children > 0 AND d.parent_id = m.id AND NOT d.satisfied"
        " AND (m.n = 'done' OR (d.finished_ok AND m.n = 'dead'))"
        " RETURNING d.child_id, d.key_order)"
        ", kids AS (SELECT child_id AS id, count(*) FILTER (WHERE NOT key_order) AS k,"
        " bool_or(key_order) AS turn FROM sat GROUP BY child_id)"
        ", held AS (SELECT c.id, c.state AS o FROM broker_task c JOIN kids ON kids.id = c.id"
        " WHERE c.state = 'blocked' OR (kids.turn AND c.key_wait) ORDER BY c.id FOR UPDATE OF c)"
        ", rel AS (UPDATE broker_task c SET"
        " blockers = CASE WHEN h.o = 'blocked' THEN c.blockers - k.k ELSE c.blockers END,"
        " key_wait = c.key_wait AND NOT k.turn,"
        " state = CASE WHEN h.o <> 'blocked' OR c.blockers > k.k THEN c.state"
        " WHEN c.available_at > c.created_at THEN 'delayed' ELSE 'ready' END,"
        " available_at = CASE WHEN h.o <> 'blocked' OR c.blockers > k.k THEN c.available_at"
        " ELSE %(now)s + (c.available_at - c.created_at) END, updated_at = %(now)s"
        " FROM held h JOIN kids k ON k.id = h.id WHERE c.id = h.id"
        " RETURNING c.queue, h.o AS o, c.state AS n, c.key_wait AS w)"
        f", woke AS (SELECT pg_notify('{CHANNEL}', queue || ':' || count(*)) FROM rel"
        " WHERE n = 'ready' AND NOT w GROUP BY queue)"
    )


RELEASE_EVENTS = ("unblock", "unblock_delayed")
# The counters' source: the settled rows, and the dependants released (or counted down).
SETTLED_AND_RELEASED = (
    "(SELECT queue, o, n, b, us FROM moved"
    " UNION ALL SELECT queue, o, n, NULL::int, NULL::bigint FROM rel) AS mr"
)
# Released tasks, for the log line.
RELEASED = (
    "(SELECT count(*) FROM rel WHERE o = 'blocked' AND n <> 'blocked')"
    " + 0 * (SELECT count(*) FROM woke)"
)

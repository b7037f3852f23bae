"""The task state machine: the only code that changes a task's state, attempts or lease.

Every verb is one transaction (on PostgreSQL's hot paths, one statement) that moves the task(s)
and their counter rows together, so `nacked + reclaimed == retried + buried` and "totals agree
with gauges" hold at every instant, whoever calls (views, the sweeper, admin, tests). The guards,
target states and counters of each move come from `broker.states.TRANSITIONS`.

    enqueue.py      enqueue, enqueue_many
    lease.py        claim, settle (ack/nack, one or many), extend
    restricted.py   the claim of paused and limited queues (max_in_flight, rate_per_s)
    deadletters.py  requeue, cancel, cancel_queue (purge)
    redelivery.py   release (handed_out → ready at once), failed attempts no worker nacked
    sweeps.py       reclaim_expired, promote_delayed, prune_finished
    counters.py     the counter rows: moving, folding, one-snapshot reads
    sql.py          every statement
"""

from broker.queue.base import (
    LEASE_EXPIRED,
    NO_ERROR_GIVEN,
    ClaimedTask,
    Delivery,
    NewTask,
    Outcome,
    Settle,
)
from broker.queue.counters import fold_deltas, gauges, stats, totals
from broker.queue.deadletters import cancel, cancel_many, cancel_queue, requeue, requeue_many
from broker.queue.enqueue import enqueue, enqueue_many
from broker.queue.lease import (
    Claimed,
    ack,
    ack_many,
    claim,
    extend,
    nack,
    nack_many,
    settle,
)
from broker.queue.redelivery import limit_receives, release, release_many
from broker.queue.sweeps import promote_delayed, prune_finished, reclaim_expired

__all__ = [
    "LEASE_EXPIRED",
    "NO_ERROR_GIVEN",
    "Claimed",
    "ClaimedTask",
    "Delivery",
    "NewTask",
    "Outcome",
    "Settle",
    "ack",
    "ack_many",
    "cancel",
    "cancel_many",
    "cancel_queue",
    "claim",
    "enqueue",
    "enqueue_many",
    "extend",
    "fold_deltas",
    "gauges",
    "limit_receives",
    "nack",
    "nack_many",
    "promote_delayed",
    "prune_finished",
    "reclaim_expired",
    "release",
    "release_many",
    "requeue",
    "requeue_many",
    "settle",
    "stats",
    "totals",
]

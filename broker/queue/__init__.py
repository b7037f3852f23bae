"""The task state machine: the only code that changes a task's state, attempts or lease.

Every verb is one transaction (on PostgreSQL's hot paths, one statement) that moves the task(s)
and their counter rows together, so `nacked + reclaimed == retried + buried` and "totals agree
with gauges" hold at every instant, whoever calls (views, the sweeper, admin, tests). The guards,
target states and counters of each move come from `broker.states.TRANSITIONS`.

    enqueue.py      enqueue, enqueue_many
    unique.py       unique keys: the holder of a key, absorbing a request (replace, debounce)
    lease.py        claim, settle (ack/nack, one or many), extend
    sizing.py       a claim's answer size: one of several stops adding tasks past 8 MiB
    progress.py     progress: the holder's report and checkpoint (no state change)
    restricted.py   the claim of paused and limited queues (max_in_flight, rate_per_s)
    deadletters.py  requeue, discard (out of the DLQ for good), cancel, cancel_queue (purge)
    redelivery.py   release (handed_out → ready at once), failed attempts no worker nacked,
                    ack_lapsed (SQS's delete after a lapsed visibility timeout)
    sweeps.py       pending (which moves have work), reclaim_expired (held after an outage:
                    hold_reclaims), promote_delayed, prune_finished
    events.py       wait_for: block on an event, release by POST /events or a timeout, suspend
    dependencies.py `after`: block at enqueue, release and cascade when parents finish
    graphs.py       workflows: enqueue a whole graph, cancel every step left
    counters.py     the counter rows: moving, folding, one-snapshot reads
    sql.py          every statement
"""

from broker.queue.base import (
    LEASE_EXPIRED,
    NO_ERROR_GIVEN,
    ClaimedTask,
    Delivery,
    Enqueued,
    NewTask,
    Outcome,
    Settle,
    Unique,
    WaitFor,
)
from broker.queue.counters import fold_deltas, gauges, live_queues, queue_gauges, stats, totals
from broker.queue.deadletters import (
    cancel,
    cancel_many,
    cancel_queue,
    discard_many,
    requeue,
    requeue_many,
)
from broker.queue.enqueue import enqueue, enqueue_answer, enqueue_batch, enqueue_many
from broker.queue.graphs import cancel_steps, enqueue_graph
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
from broker.queue.progress import Report, progress
from broker.queue.redelivery import ack_lapsed, limit_receives, release, release_many
from broker.queue.sweeps import (
    Pending,
    Pruned,
    hold_reclaims,
    pending,
    promote_delayed,
    prune_finished,
    prune_holds,
    reclaim_expired,
)

__all__ = [
    "LEASE_EXPIRED",
    "NO_ERROR_GIVEN",
    "Claimed",
    "ClaimedTask",
    "Delivery",
    "Enqueued",
    "NewTask",
    "Outcome",
    "Pending",
    "Pruned",
    "Report",
    "Settle",
    "Unique",
    "WaitFor",
    "ack",
    "ack_lapsed",
    "ack_many",
    "cancel",
    "cancel_many",
    "cancel_queue",
    "cancel_steps",
    "claim",
    "discard_many",
    "enqueue",
    "enqueue_answer",
    "enqueue_batch",
    "enqueue_graph",
    "enqueue_many",
    "extend",
    "fold_deltas",
    "gauges",
    "hold_reclaims",
    "limit_receives",
    "live_queues",
    "nack",
    "nack_many",
    "pending",
    "progress",
    "promote_delayed",
    "prune_finished",
    "prune_holds",
    "queue_gauges",
    "reclaim_expired",
    "release",
    "release_many",
    "requeue",
    "requeue_many",
    "settle",
    "stats",
    "totals",
]

"""The lifetime counters, live-state gauges and processing-time histogram of each queue."""

from __future__ import annotations

from django.db import models

from broker.states import COUNTERS, GAUGE_STATES

COUNTER_SHARDS = 16


def add_columns(model: type[models.Model], columns: tuple[str, ...]) -> None:
    """Give a counter-like model one BigIntegerField (0 by default) per column."""
    for column in columns:
        model.add_to_class(column, models.BigIntegerField(default=0, db_default=0))


class QueueCounter(models.Model):
    """One shard of one queue's counters: lifetime totals, live-state gauges, the histogram.

    Totals and gauges are sums over a queue's shards (and any CounterDelta rows): every
    transition moves its tasks and its row here in one transaction, so both read in one
    statement always agree. Sharded so that concurrent moves in one queue do not queue up behind
    one row lock; a shard's gauge may go negative, only the sum means anything.
    """

    queue = models.CharField(max_length=64)
    shard = models.SmallIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["queue", "shard"], name="queuecounter_queue_shard")
        ]

    def __str__(self) -> str:
        return f"counters of {self.queue} shard {self.shard}"


class CounterDelta(models.Model):
    """Counter moves made inside a caller's transaction (broker.enqueue, django.tasks).

    Appended, never updated: a caller's transaction may last long, and an UPDATE of a shared
    counter row would hold that row's lock until it ends, stalling or deadlocking other moves.
    The sweeper folds these into QueueCounter.
    """

    queue = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"counter delta {self.pk} of {self.queue}"


# (upper bound in seconds, counter column) for each histogram bucket, in order.
DURATION_BUCKETS: tuple[tuple[float, str], ...] = (
    (0.005, "dur_le_5ms"),
    (0.01, "dur_le_10ms"),
    (0.025, "dur_le_25ms"),
    (0.05, "dur_le_50ms"),
    (0.1, "dur_le_100ms"),
    (0.25, "dur_le_250ms"),
    (0.5, "dur_le_500ms"),
    (1.0, "dur_le_1s"),
    (2.5, "dur_le_2500ms"),
    (5.0, "dur_le_5s"),
    (10.0, "dur_le_10s"),
    (30.0, "dur_le_30s"),
    (60.0, "dur_le_60s"),
    (120.0, "dur_le_120s"),
    (300.0, "dur_le_300s"),
    (float("inf"), "dur_le_inf"),
)


HISTOGRAM_COLUMNS = (
    *(column for _, column in DURATION_BUCKETS),
    "dur_sum_us",  # microseconds: integer sums stay exact
)
GAUGE_COLUMNS = tuple(state.value for state in GAUGE_STATES)  # the live-state gauges
# Every column a counter row holds, in table order: the lifetime counters, the live-state gauges
# (named after their states), then the processing-time histogram.
COUNTER_COLUMNS: tuple[str, ...] = (*COUNTERS, *GAUGE_COLUMNS, *HISTOGRAM_COLUMNS)
add_columns(QueueCounter, COUNTER_COLUMNS)
add_columns(CounterDelta, COUNTER_COLUMNS)

"""Points of the stats history: per-minute and hourly counts, gauges and histograms."""

from __future__ import annotations

from django.db import models

from broker.models.counters import GAUGE_COLUMNS, HISTOGRAM_COLUMNS, add_columns

# What a history point holds: the contract's counts (moved in the bucket), the live-state gauges
# (the bucket's last sample) and the processing-time histogram of the bucket's acks and nacks.
HISTORY_COUNTS = ("enqueued", "acked", "nacked", "reclaimed", "buried")
HISTORY_GAUGES = GAUGE_COLUMNS
HISTORY_COLUMNS = (*HISTORY_COUNTS, *HISTORY_GAUGES, *HISTOGRAM_COLUMNS)


class HistoryPoint(models.Model):
    """One queue's bucket of history: a minute (step 60) or an hour (step 3600) from `at`.

    Minutes are recorded by the sweeper from the counter rows; hours are compacted from minutes
    once the hour is over. Counts add up, over every point, to the lifetime totals.
    """

    step = models.IntegerField()
    queue = models.CharField(max_length=64)
    at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["step", "queue", "at"], name="historypoint_bucket")
        ]
        # Every queue's points of a range (the dashboard's "all"), and pruning the oldest.
        indexes = [models.Index(fields=["step", "at"], name="historypoint_step_at_idx")]

    def __str__(self) -> str:
        return f"history of {self.queue} at {self.at} ({self.step} s)"


class HistoryMark(models.Model):
    """Per queue: its counter sums at the last recording, so the next one records the change."""

    queue = models.CharField(max_length=64, primary_key=True)
    # When a recording last saw the queue move: one that holds no task is retired a while after
    # (broker.history.recorder.RETIRE_AFTER). NULL: before marks kept it.
    moved_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"history mark of {self.queue}"


add_columns(HistoryPoint, HISTORY_COLUMNS)
add_columns(HistoryMark, HISTORY_COLUMNS)


class HistoryClock(models.Model):
    """The one row whose lock makes each recording, compaction and pruning happen once, however
    many sweepers run: when history was last recorded and which hours are compacted."""

    recorded_at = models.DateTimeField(null=True)
    # Hours starting before this are compacted: their hour points are whole.
    compacted_until = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"history recorded at {self.recorded_at}"

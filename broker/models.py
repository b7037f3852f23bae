"""Tasks, their error history and the lifetime counters."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.db.models import Q

from broker.states import COUNTERS, GAUGE_STATES, Priority, State

COUNTER_SHARDS = 16


class TaskQuerySet(models.QuerySet):
    """Adjectives for the queries the state machine and the views share."""

    def ready(self, queues: list[str] | None = None) -> TaskQuerySet:
        qs = self.filter(state=State.READY)
        return qs.filter(queue__in=queues) if queues else qs

    def claim_order(self) -> TaskQuerySet:
        # Must match the claim indexes' column order, so the claim is an index range scan.
        return self.order_by("priority", "available_at", "id")

    def expired(self, now: datetime) -> TaskQuerySet:
        return self.filter(state=State.HANDED_OUT, lease_deadline__lt=now)

    def due(self, now: datetime) -> TaskQuerySet:
        return self.filter(state=State.DELAYED, available_at__lte=now)

    def dead(self) -> TaskQuerySet:
        return self.filter(state=State.DEAD)

    def lock_skipping_locked(self) -> TaskQuerySet:
        """Rows nobody else is moving; call inside a short transaction."""
        return self.select_for_update(skip_locked=True)


class Task(models.Model):
    """One unit of work. Only `broker.queue` writes `state`, `attempts` and the lease."""

    state = models.CharField(max_length=16, choices=State.choices, default=State.READY)
    queue = models.CharField(max_length=64, default="default")
    priority = models.SmallIntegerField(choices=Priority.choices, default=Priority.NORMAL)
    type = models.CharField(max_length=64, null=True, blank=True)
    # JSON as text, not jsonb: PostgreSQL's jsonb cannot hold U+0000, and the contract says a
    # payload comes back exactly as sent.
    payload = models.TextField()
    result = models.TextField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    # NULL: attempts are unlimited (an SQS message without a RedrivePolicy is never dead-lettered).
    max_attempts = models.PositiveSmallIntegerField(default=3, null=True)
    # False: a failed attempt (nack, expired lease) is retried at once, without backoff, as SQS
    # makes a message visible again the moment its visibility timeout lapses.
    backoff = models.BooleanField(default=True, db_default=True)
    available_at = models.DateTimeField()
    lease_id = models.CharField(max_length=32, null=True, blank=True)
    lease_deadline = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=255, null=True, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True, unique=True)
    last_error = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    objects = TaskQuerySet.as_manager()

    class Meta:
        indexes = [
            # The claim: partial on ready, so 10 or 10 million finished rows cost the same.
            models.Index(
                fields=["priority", "available_at", "id"],
                condition=Q(state="ready"),
                name="task_claim_idx",
            ),
            models.Index(
                fields=["queue", "priority", "available_at", "id"],
                condition=Q(state="ready"),
                name="task_claim_queue_idx",
            ),
            models.Index(
                fields=["lease_deadline"], condition=Q(state="handed_out"), name="task_lease_idx"
            ),
            models.Index(
                fields=["available_at"], condition=Q(state="delayed"), name="task_delayed_idx"
            ),
            models.Index(fields=["updated_at"], condition=Q(state="dead"), name="task_dead_idx"),
            # Retention: the sweeper prunes the oldest finished tasks in small batches.
            models.Index(
                fields=["updated_at"],
                condition=Q(state__in=["done", "cancelled"]),
                name="task_finished_idx",
            ),
            # Gauges and per-queue counts. Partial on the live states: a full (state, queue) index
            # tempted the planner, with stale statistics after a burst of new tasks, to claim by
            # scanning it and sorting every ready row (measured: 582 ms a claim at 300k ready).
            models.Index(
                fields=["queue", "state"],
                condition=Q(state__in=["ready", "handed_out", "delayed", "dead"]),
                name="task_live_queue_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"task {self.pk} ({self.state})"


class TaskError(models.Model):
    """The error of one failed attempt; a task keeps all of them."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="error_history")
    attempt = models.PositiveSmallIntegerField()
    at = models.DateTimeField()
    error = models.TextField()

    class Meta:
        ordering = ["task_id", "id"]

    def __str__(self) -> str:
        return f"task {self.task_id} attempt {self.attempt}: {self.error[:60]}"


def _counter_columns(model: type[models.Model]) -> None:
    """Give a counter model one BigIntegerField per counter, gauge and histogram column."""
    for column in COUNTER_COLUMNS:
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


# Every column a counter row holds, in table order: the lifetime counters, the live-state gauges
# (named after their states), then the processing-time histogram.
COUNTER_COLUMNS: tuple[str, ...] = (
    *COUNTERS,
    *(state.value for state in GAUGE_STATES),
    *(column for _, column in DURATION_BUCKETS),
    "dur_sum_us",  # microseconds: integer sums stay exact
)
_counter_columns(QueueCounter)
_counter_columns(CounterDelta)


class DeadTaskManager(models.Manager.from_queryset(TaskQuerySet)):  # type: ignore[misc]
    """Only the tasks in the dead-letter queue."""

    def get_queryset(self) -> TaskQuerySet:
        return super().get_queryset().filter(state=State.DEAD)


class DeadTask(Task):
    """A task in the dead-letter queue: the admin's DLQ page lists these."""

    objects = DeadTaskManager()

    class Meta:
        proxy = True
        verbose_name = "dead task"
        verbose_name_plural = "dead-letter queue"


# -- queues, claimers, schedules: settings, not task state ---------------------------------------

# A queue whose settings can hold back a claim: paused, or limited in flight or in rate. Raw SQL
# (the claim statements, broker.queue.sql) spells the same condition.
RESTRICTED = Q(paused=True) | Q(max_in_flight__isnull=False) | Q(rate_per_s__isnull=False)


class Queue(models.Model):
    """A queue's settings (broker.queues changes them). A queue without a row has none."""

    name = models.CharField(max_length=64, primary_key=True)
    paused = models.BooleanField(default=False)
    max_in_flight = models.PositiveIntegerField("max in flight", null=True, blank=True)
    rate_per_s = models.FloatField("rate (tasks/s)", null=True, blank=True)
    # The rate limiter's token bucket, moved only by a claim holding this row's lock.
    tokens = models.FloatField(default=0)
    refilled_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ClaimScope(models.Model):
    """When a claim request last named this queue ("*": a claim from every queue)."""

    scope = models.CharField(max_length=64, primary_key=True)
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"claims of {self.scope} seen {self.seen_at}"


class Schedule(models.Model):
    """A periodic task: at each due time the sweeper enqueues `job` (a POST /jobs body) once."""

    name = models.CharField(max_length=64, primary_key=True)
    cron = models.CharField(max_length=255, null=True, blank=True)
    timezone = models.CharField(max_length=64, null=True, blank=True)
    every_s = models.PositiveIntegerField(null=True, blank=True)
    job = models.TextField()  # the enqueue body, JSON text, validated as POST /jobs validates
    paused = models.BooleanField(default=False)
    # Due times of `every_s` fall at anchored_at + k * every_s; set when the timing is set.
    anchored_at = models.DateTimeField()
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_task_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        indexes = [
            models.Index(fields=["next_run_at"], condition=Q(paused=False), name="schedule_due_idx")
        ]

    def __str__(self) -> str:
        return self.name


class SqsQueue(models.Model):
    """A queue's SQS attributes (broker/sqs), keyed by its name; its messages are plain tasks."""

    name = models.CharField(max_length=64, primary_key=True)
    visibility_timeout_s = models.IntegerField(default=30)
    receive_wait_s = models.SmallIntegerField(default=0)
    delay_s = models.SmallIntegerField(default=0)
    max_message_bytes = models.IntegerField(default=262_144)
    retention_s = models.IntegerField(default=345_600)  # accepted and reported, not enforced
    # RedrivePolicy: maxReceiveCount becomes the max_attempts of the queue's SQS messages (NULL:
    # no policy, receives unlimited); the target ARN is reported back, the DLQ is the broker's.
    max_receive_count = models.SmallIntegerField(null=True, blank=True)
    dead_letter_target_arn = models.CharField(max_length=256, blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name = "SQS queue"

    def __str__(self) -> str:
        return f"SQS queue {self.name}"

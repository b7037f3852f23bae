"""Queues, keys, claimers, schedules and SQS queues: settings and bookkeeping, not task state."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

# A queue whose settings can hold back a claim: paused, or limited in flight or in rate. Raw SQL
# (the claim statements, broker.queue.sql) spells the same condition.
RESTRICTED = (
    Q(paused=True)
    | Q(max_in_flight__isnull=False)
    | Q(rate_per_s__isnull=False)
    | Q(fair=True)
    | Q(key_max_in_flight__isnull=False)
)


class Queue(models.Model):
    """A queue's settings (broker.queues changes them). A queue without a row has none."""

    name = models.CharField(max_length=64, primary_key=True)
    paused = models.BooleanField(default=False)
    max_in_flight = models.PositiveIntegerField("max in flight", null=True, blank=True)
    rate_per_s = models.FloatField("rate (tasks/s)", null=True, blank=True)
    # Keys (broker/queue/keys.py): share claims among keys; cap each key's tasks in flight;
    # hand out each key's tasks one at a time, in enqueue order.
    fair = models.BooleanField(default=False, db_default=False)
    key_max_in_flight = models.PositiveIntegerField("key max in flight", null=True, blank=True)
    ordered = models.BooleanField(default=False, db_default=False)
    # Made by SQS's CreateQueue (not a broker queue SQS only looked up): a claim that names no
    # queue leaves its messages to ReceiveMessage and to claims naming it. On this row, so the
    # one-statement claim's gate reads it in the scan it makes anyway.
    made_by_sqs = models.BooleanField(default=False, db_default=False, editable=False)
    # The rate limiter's token bucket, moved only by a claim holding this row's lock.
    tokens = models.FloatField(default=0)
    refilled_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        # Every claim asks whether a restricted queue is in its scope (broker.queue.sql), and a
        # claim naming no queue whether SQS made one: one probe of this index, however many
        # plain rows admin made for the queues it lists.
        indexes = [
            models.Index(
                fields=["name"],
                condition=RESTRICTED | Q(made_by_sqs=True),
                name="queue_restricted_idx",
            )
        ]

    def __str__(self) -> str:
        return self.name


class QueueName(models.Model):
    """A queue some task, setting or SQS CreateQueue named, in the order first named (by id:
    GET /queues lists the newest first). broker/queue/names.py keeps it: moves do not write here
    (an enqueue stays one statement); the names of the counter rows are caught up before any
    read or write of the list, so its order is the order of naming."""

    name = models.CharField(max_length=64, unique=True)
    # A task named it: SQS's DeleteQueue, which forgets settings, does not forget the queue.
    by_task = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.name


class KeyState(models.Model):
    """One key of one queue (keyless tasks: key ""): when a claim last handed out one of its
    tasks (fair claims take the key served longest ago first; never: when the key appeared, a
    thousand years back, keys.unserved), and, in an ordered
    queue, its last task (the next one enqueued waits for it). Locked by the enqueues of its
    key; pruned by the sweeper once the key has no live task and no hand-out for 10 minutes,
    upserted again by the requeue of a dead task of the key."""

    queue = models.CharField(max_length=64)
    key = models.CharField(max_length=128)
    served_at = models.DateTimeField()
    tail = models.BigIntegerField(null=True, blank=True)
    # Set by the sweeper (broker.queue.keys.sleep) on a key with nothing claimable and nothing
    # that can become so but its delayed tasks: until the first of them is due (the year 9999:
    # it has no live task). A fair claim's rounds walk only the keys awake; the enqueue of a task
    # of the key (or a requeue) wakes it, and so does the first fair claim after that time.
    asleep_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["queue", "key"], name="keystate_queue_key")]
        indexes = [
            models.Index(
                fields=["queue", "served_at", "key"],
                condition=Q(asleep_until__isnull=True),
                name="keystate_awake_idx",
            ),
            models.Index(
                fields=["queue", "asleep_until"],
                condition=Q(asleep_until__isnull=False),
                name="keystate_asleep_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"key {self.key!r} of {self.queue}"


class ClaimScope(models.Model):
    """When a claim request last named this queue ("*": a claim from every queue)."""

    scope = models.CharField(max_length=64, primary_key=True)
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"claims of {self.scope} seen {self.seen_at}"


class ReclaimHold(models.Model):
    """Leases whose deadline is at or after `since` are not reclaimed before `until`: they ran out
    while a sweeper could not reach the database, and their workers could not settle them."""

    since = models.DateTimeField()
    until = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"leases ending from {self.since} held until {self.until}"


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
    max_message_bytes = models.IntegerField(default=1_048_576)  # SQS's default since 2025
    retention_s = models.IntegerField(default=345_600)  # accepted and reported, not enforced
    # RedrivePolicy: maxReceiveCount becomes the max_attempts of the queue's SQS messages (NULL:
    # no policy, receives unlimited); the target ARN is reported back, the DLQ is the broker's.
    max_receive_count = models.SmallIntegerField(null=True, blank=True)
    dead_letter_target_arn = models.CharField(max_length=256, blank=True, default="")
    # FifoQueue (set at CreateQueue only; the broker queue is `ordered`) and, on such a queue,
    # ContentBasedDeduplication (the SHA-256 of a body is its deduplication id).
    fifo = models.BooleanField(default=False, db_default=False)
    content_based_dedup = models.BooleanField(default=False, db_default=False)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name = "SQS queue"

    def __str__(self) -> str:
        return f"SQS queue {self.name}"


class SqsDedup(models.Model):
    """A deduplication id a FIFO queue saw (broker/sqs/dedup.py): until `expires_at` a message
    sent with it again is not enqueued, and answers with `task_id`, the first one's. The unique
    pair decides between racing senders; the sweeper deletes expired rows."""

    queue = models.CharField(max_length=64)
    dedup_id = models.CharField(max_length=128)
    # NULL only inside the transaction that inserted the row: it enqueues, then sets it.
    task_id = models.BigIntegerField(null=True, blank=True)
    expires_at = models.DateTimeField()

    class Meta:
        verbose_name = "SQS deduplication id"
        constraints = [
            models.UniqueConstraint(fields=["queue", "dedup_id"], name="sqsdedup_queue_id")
        ]
        indexes = [models.Index(fields=["expires_at"], name="sqsdedup_expires_idx")]

    def __str__(self) -> str:
        return f"deduplication id {self.dedup_id!r} of {self.queue}"


class SqsMessage(models.Model):
    """What SQS keeps of a message beside its task's payload, which stays {"body", "attributes"}
    as API.md has it: a FIFO message's deduplication id, the system attributes it was sent with
    (AWSTraceHeader). Only messages with either have a row (broker/sqs/extras.py); the sweeper
    deletes the rows of tasks that are gone."""

    task_id = models.BigIntegerField(primary_key=True)
    deduplication_id = models.CharField(max_length=128, null=True, blank=True)
    system_attributes = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name = "SQS message extra"

    def __str__(self) -> str:
        return f"SQS extras of task {self.task_id}"

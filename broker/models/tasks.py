"""Tasks, their dependencies, workflows and error history; the dead-letter queue's view of them."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.db.models import Q, Value
from django.db.models.functions import Coalesce

from broker.states import Priority, State


class TaskQuerySet(models.QuerySet):
    """Adjectives for the queries the state machine and the views share."""

    def ready(self, queues: list[str] | None = None) -> TaskQuerySet:
        """Ready to be claimed: not waiting for an earlier task of its key (sql.CLAIMABLE)."""
        qs = self.filter(state=State.READY, key_wait=False)
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
    # Unique among the tasks that have one (Meta.constraints): a plain unique=True indexed every
    # row, NULLs too, and brought a second (LIKE) index; every move of every task paid for both.
    # A token's keys are kept apart from others' (broker.tokens.access.idempotency_key): stored
    # with its marker before them, so longer than the 255 characters a client may send.
    idempotency_key = models.CharField(max_length=300, null=True, blank=True)
    last_error = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    # Dependencies (broker.queue.dependencies): NULL without `after`, else "done" or "finished".
    # While blocked, `blockers` counts the tasks named in `after` not yet finished as the policy
    # wants, and available_at - created_at holds delay_ms (counted from the release).
    after_policy = models.CharField(max_length=8, null=True, blank=True)
    blockers = models.SmallIntegerField(default=0, db_default=0)
    # How many tasks ever named this one in `after`: 0 lets a settle skip the dependency rows;
    # a new dependant bumps it, so a settle that raced with it sees the row changed.
    children = models.IntegerField(default=0, db_default=0)
    workflow = models.ForeignKey(
        "Workflow",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="tasks",
        db_index=False,  # task_workflow_idx: the steps of workflows only, not every task
    )
    ref = models.CharField(max_length=64, null=True, blank=True)
    # The name of the access token that enqueued it (NULL: an env token, or an open broker).
    enqueued_by = models.CharField(max_length=100, null=True, blank=True)
    # Keys (broker/queue/keys.py): a tenant's, customer's or entity's id; NULL for none.
    key = models.CharField(max_length=128, null=True, blank=True)
    # In an `ordered` queue: an earlier task of its key is unfinished (a Dependency row with
    # key_order says which). Not claimable meanwhile: the claim indexes leave it out.
    key_wait = models.BooleanField(default=False, db_default=False)
    # The holder's last report (POST /jobs/{id}/progress): kept through every move, so a done
    # task shows how far it got and a redelivered one resumes from its checkpoint (JSON text).
    progress_fraction = models.FloatField(null=True, blank=True)
    progress_message = models.TextField(null=True, blank=True)
    progress_at = models.DateTimeField(null=True, blank=True)
    checkpoint = models.TextField(null=True, blank=True)
    # Unique tasks (broker/queue/unique.py): the task holds this key of its queue while the
    # enqueue's `until` says so; `absorbed` counts the enqueues it answered while pending (never
    # handed out), each of which may have replaced its payload or pushed its time (debounce).
    unique_key = models.CharField(max_length=255, null=True, blank=True)
    absorbed = models.IntegerField(default=0, db_default=0)
    # The event that released it (broker.queue.events), as its deliveries show it (JSON text:
    # {"id", "name", "key", "data", "at"}); NULL before, and after a wait that timed out.
    event = models.TextField(null=True, blank=True)

    objects = TaskQuerySet.as_manager()

    class Meta:
        # Partial, as the enqueue's ON CONFLICT names it (sqlenqueue): keyless tasks, most of
        # them, are not in it.
        constraints = [
            models.UniqueConstraint(
                fields=["idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="task_idempotency_key_uniq",
            ),
            # At most one pending task (never handed out, not finished) per queue and unique key:
            # two enqueues racing on any broker processes insert one task, the other's insert
            # conflicts and it answers with the winner (broker.queue.unique). A task leaves the
            # index when it is first handed out (claimed_at is never cleared), so retries,
            # requeues and the new task a "started" key allows beside a running one coexist:
            # no existing move can conflict. Keyless tasks are not in it.
            models.UniqueConstraint(
                fields=["queue", "unique_key"],
                condition=Q(
                    unique_key__isnull=False,
                    claimed_at__isnull=True,
                    state__in=["blocked", "delayed", "ready"],
                ),
                name="task_unique_pending_uniq",
            ),
        ]
        indexes = [
            # The claim: partial on ready, so 10 or 10 million finished rows cost the same.
            models.Index(
                fields=["priority", "available_at", "id"],
                condition=Q(state="ready", key_wait=False),
                name="task_claim_idx",
            ),
            models.Index(
                fields=["queue", "priority", "available_at", "id"],
                condition=Q(state="ready", key_wait=False),
                name="task_claim_queue_idx",
            ),
            # A fair claim: each key's claimable tasks of a priority in claim order (keyless ones
            # as key ""), and whether keys other than the full ones have tasks of a priority (a
            # probe per range of keys between two full keys: broker.queue.keyclaims).
            models.Index(
                "queue",
                "priority",
                Coalesce("key", Value("")),
                "available_at",
                "id",
                condition=Q(state="ready", key_wait=False),
                name="task_key_claim_idx",
            ),
            # key_max_in_flight: each key's tasks handed out now (few rows: those in flight).
            models.Index(
                fields=["queue", "key"],
                condition=Q(state="handed_out", key__isnull=False),
                name="task_key_held_idx",
            ),
            # Whether a key has live tasks: the prune of idle keys.
            models.Index(
                fields=["queue", "key"],
                condition=Q(
                    key__isnull=False, state__in=["ready", "handed_out", "delayed", "blocked"]
                ),
                name="task_key_live_idx",
            ),
            # GET /jobs?key=: newest first.
            models.Index(
                fields=["key", "-id"], condition=Q(key__isnull=False), name="task_key_idx"
            ),
            # A unique key's holder (oldest first) and GET /jobs?unique_key=.
            models.Index(
                fields=["unique_key", "queue", "id"],
                condition=Q(unique_key__isnull=False),
                name="task_unique_key_idx",
            ),
            models.Index(
                fields=["lease_deadline"], condition=Q(state="handed_out"), name="task_lease_idx"
            ),
            models.Index(
                fields=["available_at"], condition=Q(state="delayed"), name="task_delayed_idx"
            ),
            models.Index(fields=["updated_at"], condition=Q(state="dead"), name="task_dead_idx"),
            # A workflow's steps (its page, cancel_steps, the Workflow's deletion); with the
            # state, whether one is still live is one probe (retention keeps such workflows).
            models.Index(
                fields=["workflow", "state"],
                condition=Q(workflow__isnull=False),
                name="task_workflow_idx",
            ),
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
                condition=Q(state__in=["ready", "handed_out", "delayed", "dead", "blocked"]),
                name="task_live_queue_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"task {self.pk} ({self.state})"


class Dependency(models.Model):
    """`child` waits for `parent` (one item of the child's `after`)."""

    child = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="waits_for")
    parent = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="waited_for_by")
    position = models.SmallIntegerField()  # in the child's `after`
    # Not an `after` item: the child is the next task of the parent's key in an ordered queue
    # (any end of the parent lets it go; it only clears the child's key_wait).
    key_order = models.BooleanField(default=False, db_default=False)
    # The parent finished as the child's policy wants (done; or dead or cancelled under
    # "finished"): counted off the child's blockers once, never again.
    satisfied = models.BooleanField(default=False)
    finished_ok = models.BooleanField(default=False)  # the child's policy is "finished"

    class Meta:
        constraints = [
            # A task may wait for another both by `after` and as the next of its key.
            models.UniqueConstraint(
                fields=["child", "parent", "key_order"], name="dependency_child_parent"
            )
        ]
        # A parent's rows; with the child, whether one waits with a lower id is one probe (a
        # settle in one statement: broker.queue.sqlrelease.in_one_statement).
        indexes = [models.Index(fields=["parent", "child"], name="dependency_parent_idx")]

    def __str__(self) -> str:
        return f"task {self.child_id} after {self.parent_id}"


class Workflow(models.Model):
    """A graph of tasks submitted in one call (broker/workflows); its steps are plain tasks."""

    name = models.CharField(max_length=200)
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["name"], name="workflow_name_idx")]

    def __str__(self) -> str:
        return f"workflow {self.pk} ({self.name})"


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

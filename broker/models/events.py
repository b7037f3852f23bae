"""Events and the tasks waiting for them (API.md "Waiting for events, and approvals")."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from broker.models.tasks import Task


class Event(models.Model):
    """A received event (POST /events, an approval), kept for BROKER_EVENT_RETENTION so that a
    wait made after it still matches it."""

    name = models.CharField(max_length=200)
    key = models.CharField(max_length=255)
    data = models.TextField()  # JSON text, as sent
    received_at = models.DateTimeField()
    # The queue patterns the sender's token may produce to (JSON list of fnmatch globs); NULL:
    # every queue (an env token, an open broker). A kept event matches only those queues' waits.
    scope = models.TextField(null=True, blank=True)

    class Meta:
        indexes = [
            # The newest kept event of a name and key (a new wait; GET /events).
            models.Index(fields=["name", "key", "-received_at"], name="event_name_key_idx"),
            models.Index(fields=["received_at"], name="event_received_idx"),
        ]

    def __str__(self) -> str:
        return f"event {self.pk} {self.name}:{self.key}"


class EventWait(models.Model):
    """A blocked task waits for the event `name` with `key` (one wait per task at a time). While
    it waits, the wait counts as one of the task's `blockers`."""

    task = models.OneToOneField(
        Task, primary_key=True, on_delete=models.CASCADE, related_name="event_wait"
    )
    name = models.CharField(max_length=200)
    key = models.CharField(max_length=255)
    since = models.DateTimeField(null=True, blank=True)
    began_at = models.DateTimeField()
    deadline = models.DateTimeField(null=True, blank=True)  # NULL: waits for ever
    on_timeout = models.CharField(max_length=8, default="cancel")

    class Meta:
        indexes = [
            models.Index(fields=["name", "key"], name="eventwait_name_key_idx"),
            models.Index(
                fields=["deadline"], condition=Q(deadline__isnull=False), name="eventwait_due_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"task {self.task_id} waits for {self.name}:{self.key}"


class Approval(EventWait):
    """A task waiting for the event `approval` (admin's Approvals page): deciding posts that
    event with its key. Deciding needs a permission of its own."""

    class Meta:
        proxy = True
        verbose_name = "approval"
        verbose_name_plural = "approvals"
        permissions = [("decide_approval", "Can approve or reject tasks waiting for approval")]

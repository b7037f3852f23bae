"""What the dashboard may show a staff user: what their admin permissions let them view.

Each part of the dashboard mirrors an admin page, and is shown to the users that admin would let
view it (view or change permission, as the model admin decides): counts to who may list tasks or
queues, errors of dead tasks to who may list tasks or the dead-letter queue, running tasks,
their progress and the busiest keys to who may list tasks, queue settings to who may list queues.
A staff user with none of these sees an empty dashboard that says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

from broker.models import DeadTask, Queue, Task


def _may_view(request: HttpRequest, model: type[Model]) -> bool:
    try:
        model_admin = admin.site.get_model_admin(model)
    except admin.sites.NotRegistered:
        return False
    return bool(model_admin.has_view_or_change_permission(request))


@dataclass(frozen=True)
class Sight:
    """The admin lists a user may view, and what of the dashboard follows from them."""

    tasks: bool  # the task list
    dead: bool  # the dead-letter queue
    queues: bool  # the queues, with their settings

    @classmethod
    def of(cls, request: HttpRequest) -> Sight:
        return cls(
            tasks=_may_view(request, Task),
            dead=_may_view(request, DeadTask),
            queues=_may_view(request, Queue),
        )

    @property
    def counts(self) -> bool:
        """Gauges, totals, per-queue counts, rates and history: both lists show counts."""
        return self.tasks or self.queues

    @property
    def errors(self) -> bool:
        """The dead tasks' errors: on the task pages and in the dead-letter queue."""
        return self.tasks or self.dead

    @property
    def anything(self) -> bool:
        return self.counts or self.errors


EVERYTHING = Sight(tasks=True, dead=True, queues=True)

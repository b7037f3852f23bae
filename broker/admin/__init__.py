"""Admin: read-only tasks, the dead-letter queue, queue settings and schedules, and actions
that go through broker.queue. Importing the package registers every page."""

from broker.admin import dead, queues, tasks  # noqa: F401

"""Admin: read-only tasks, the dead-letter queue, queue settings and schedules, job types, and
actions that go through broker.queue. Importing the package registers every page."""

from broker.admin import dead, queues, tasks  # noqa: F401
from broker.tokens import admin as tokens  # noqa: F401
from broker.types import admin as types  # noqa: F401

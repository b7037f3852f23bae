"""Admin: read-only tasks, the dead-letter queue, queue settings and schedules, job types,
access tokens, and actions that go through broker.queue. Importing the package registers every
page, and makes every action of theirs write admin's log (broker.admin.audit)."""

from django.contrib import admin as _admin

from broker.admin import audit, dead, queues, tasks  # noqa: F401
from broker.events import admin as approvals  # noqa: F401
from broker.tokens import admin as tokens  # noqa: F401
from broker.types import admin as types  # noqa: F401
from broker.workflows import admin as workflows  # noqa: F401

audit.install(_admin.site)

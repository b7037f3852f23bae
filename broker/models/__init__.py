"""The broker's models, by what they hold: tasks, counters, settings, history, job types.
Django and the rest of the code import them from here."""

from broker.models.counters import (
    COUNTER_COLUMNS,
    COUNTER_SHARDS,
    DURATION_BUCKETS,
    GAUGE_COLUMNS,
    HISTOGRAM_COLUMNS,
    CounterDelta,
    QueueCounter,
)
from broker.models.events import Approval, Event, EventWait
from broker.models.history import (
    HISTORY_COLUMNS,
    HISTORY_COUNTS,
    HISTORY_GAUGES,
    HistoryClock,
    HistoryMark,
    HistoryPoint,
)
from broker.models.settings import (
    RESTRICTED,
    ClaimScope,
    KeyState,
    Queue,
    QueueName,
    ReclaimHold,
    Schedule,
    SqsDedup,
    SqsMessage,
    SqsQueue,
)
from broker.models.tasks import DeadTask, Dependency, Task, TaskError, TaskQuerySet, Workflow
from broker.models.tokens import AccessToken, TokenGeneration
from broker.models.types import JobType

__all__ = [
    "COUNTER_COLUMNS", "COUNTER_SHARDS", "DURATION_BUCKETS", "GAUGE_COLUMNS", "HISTOGRAM_COLUMNS",
    "HISTORY_COLUMNS", "HISTORY_COUNTS", "HISTORY_GAUGES", "RESTRICTED", "AccessToken", "Approval",
    "ClaimScope",
    "CounterDelta", "DeadTask", "Dependency", "Event", "EventWait", "HistoryClock", "HistoryMark",
    "HistoryPoint",
    "JobType", "KeyState", "Queue", "QueueCounter", "QueueName", "ReclaimHold", "Schedule",
    "SqsDedup",
    "SqsMessage", "SqsQueue", "Task", "TaskError", "TaskQuerySet", "TokenGeneration", "Workflow",
]  # fmt: skip

"""The broker's errors; each knows its HTTP status, and its docstring is the default message."""

from __future__ import annotations


class BrokerError(Exception):
    """The broker could not do that."""

    status_code = 400

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self)


class TaskNotFound(BrokerError):
    """No such task."""

    status_code = 404


class TaskNotHeld(TaskNotFound):
    """The task is not handed out (unknown, reclaimed, cancelled or finished)."""


class NotInDeadLetterQueue(TaskNotFound):
    """The task is not in the dead-letter queue."""


class LeaseMismatch(BrokerError):
    """The task is handed out under another lease."""

    status_code = 409


class InvalidTransition(BrokerError):
    """The task is not in a state this call can move it from."""

    status_code = 409


class InternalError(BrokerError):
    """Internal error; it has been logged."""

    status_code = 500


class NotFound(BrokerError):
    """Not found."""

    status_code = 404


class DatabaseUnavailable(BrokerError):
    """The database cannot be reached; try again shortly."""

    status_code = 503


class InvalidFields(BrokerError, ValueError):
    """Bad fields; `fields` maps each to its messages, the first named in the message."""

    status_code = 400

    def __init__(self, fields: dict[str, list[str]]) -> None:
        self.fields = fields
        name, messages = next(iter(fields.items()))
        super().__init__(f"Invalid {name}: {messages[0]}")


class InvalidTaskError(BrokerError, ValueError):
    """An enqueue the HTTP API would answer with a 400; `fields` names each bad argument.

    Raised by broker.validation for every way in: POST /jobs and /jobs/batch (a 400 with these
    fields), broker.enqueue() and the django.tasks backend.
    """

    status_code = 400

    def __init__(self, fields: dict[str, list[str]]) -> None:
        """fields maps each bad field (dotted: "payload.url", "jobs.3.queue") to its messages."""
        self.fields = fields
        detail = "; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in fields.items())
        super().__init__(f"invalid task: {detail}")


class UniqueKeyHeld(InvalidTaskError):
    """A workflow step's unique key is already held (outside the workflow, or by an earlier
    step): a workflow's steps are its own new tasks, so nothing is created. A 409 naming the
    step's `unique` (steps.3.job.unique)."""

    status_code = 409

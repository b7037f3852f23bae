"""A job-queue broker: tasks in a database, an HTTP API, leases, retries and a dead-letter queue."""

from broker.client import InvalidTaskError, enqueue, submit_workflow

__all__ = ["InvalidTaskError", "enqueue", "submit_workflow"]

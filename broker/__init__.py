"""A job-queue broker: tasks in the database, an HTTP API, leases, retries and a dead-letter queue."""

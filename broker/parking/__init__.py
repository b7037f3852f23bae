"""Parked long-polls held without a thread: `loop` (one epoll set per process, the polls it
holds, what wakes them) and `worker` (gunicorn's gthread worker that hands them to it)."""

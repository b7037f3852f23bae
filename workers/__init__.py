"""Workers that claim tasks from the broker over HTTP, and the commands that run them.

`from workers import handler` declares a function of yours the handler of a job type
(workers.handlers).
"""

from workers.handlers import handler

__all__ = ["handler"]

"""Concurrency-test helpers: threads whose errors the test reports."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connections


def in_thread(target: Callable[[], None], errors: list[BaseException]) -> threading.Thread:
    """A started thread running target: what it raises lands in errors; its connections close."""

    def run() -> None:
        try:
            target()
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread

"""What a call reads, counted rather than timed (these machines are noisy): the rows it fetches
from the database, and a helper naming many queues."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db.backends.utils import CursorWrapper

from broker import queue
from broker.queue import NewTask


class Fetched:
    """Rows fetched through Django's cursors (raw statements and the ORM alike) so far."""

    rows = 0


@contextmanager
def rows_fetched() -> Iterator[Fetched]:
    """Count every row any cursor fetches inside the block."""
    seen = Fetched()

    def fetchone(self: CursorWrapper) -> Any:
        with self.db.wrap_database_errors:
            row = self.cursor.fetchone()
        seen.rows += row is not None
        return row

    def fetchmany(self: CursorWrapper, *args: Any) -> Any:
        with self.db.wrap_database_errors:
            rows = self.cursor.fetchmany(*args)
        seen.rows += len(rows)
        return rows

    def fetchall(self: CursorWrapper) -> Any:
        with self.db.wrap_database_errors:
            rows = self.cursor.fetchall()
        seen.rows += len(rows)
        return rows

    def iterate(self: CursorWrapper) -> Iterator[Any]:
        with self.db.wrap_database_errors:
            for row in self.cursor:
                seen.rows += 1
                yield row

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CursorWrapper, "fetchone", fetchone, raising=False)
        mp.setattr(CursorWrapper, "fetchmany", fetchmany, raising=False)
        mp.setattr(CursorWrapper, "fetchall", fetchall, raising=False)
        mp.setattr(CursorWrapper, "__iter__", iterate)
        yield seen


def name_queues(n: int, prefix: str = "q", first: int = 0) -> list[str]:
    """One ready task in each of `n` new queues `<prefix>00000`...; their names, in order."""
    names = [f"{prefix}{i:05d}" for i in range(first, first + n)]
    for at in range(0, n, 1000):
        queue.enqueue_many([NewTask(payload="1", queue=name) for name in names[at : at + 1000]])
    return names


def finish_all() -> None:
    """Claim every ready task and ack it."""
    while got := queue.claim(None, 60_000, limit=100):
        queue.settle([(d.task.pk, d.lease_id, None) for d in got], [])

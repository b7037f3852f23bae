"""When claim requests last named each queue, for `waiting`'s `no_workers`, without slowing claims.

A claim only notes its scope in this process's memory (a dict write); a daemon thread writes the
notes to ClaimScope once a second, one upsert for every scope seen since, so however many claims a
process answers, it writes at most one statement a second. A queue has workers when a row for it,
or for "*" (a claim from every queue), was seen within WORKERS_SEEN_S.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max

from broker.models import ClaimScope
from broker.queue.base import current_time
from contract.limits import WORKERS_SEEN_S

log = logging.getLogger(__name__)

EVERY_QUEUE = "*"  # cannot be a queue name
FLUSH_EVERY_S = 1.0
_UPSERT = (
    'INSERT INTO "broker_claimscope" ("scope", "seen_at") VALUES {rows}'
    ' ON CONFLICT ("scope") DO UPDATE SET "seen_at" = excluded."seen_at"'
    ' WHERE "broker_claimscope"."seen_at" < excluded."seen_at"'
)


class ClaimLog:
    """This process's notes of claim scopes, and the thread that writes them."""

    def __init__(self) -> None:
        self._pending: dict[str, datetime] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def seen(self, queues: list[str] | None) -> None:
        """Note a claim request for `queues` (None: every queue). No database work."""
        now = current_time()
        with self._lock:
            for scope in queues or (EVERY_QUEUE,):
                self._pending[scope] = now
        if settings.BROKER_CLAIM_LOG_THREAD and (self._thread is None or self._pid != os.getpid()):
            self._start()

    def flush(self) -> int:
        """Write the notes taken since the last flush, in one statement; returns how many."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return 0
        scopes = sorted(pending)  # one lock order for every process
        params: list[Any] = []
        for scope in scopes:
            params += [scope, connection.ops.adapt_datetimefield_value(pending[scope])]
        rows = ", ".join(["(%s, %s)"] * len(scopes))
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_UPSERT.format(rows=rows), params)
        return len(scopes)

    def reset(self) -> None:
        """Forget the notes not yet written (tests)."""
        with self._lock:
            self._pending = {}

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None and self._pid == os.getpid():
                return
            self._pid = os.getpid()  # after a fork (gunicorn) the parent's thread is not here
            self._thread = threading.Thread(target=self._run, name="broker-claim-log", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        stop = threading.Event()
        while not stop.wait(FLUSH_EVERY_S):
            try:
                if self.flush():
                    connection.close()  # back to the pool until the next second's notes
            except Exception as exc:  # the database away: the next notes try again
                log.warning("could not record claim scopes: %s", exc)
                connection.close()


claim_log = ClaimLog()


def workers_seen(queue_name: str, now: datetime | None = None) -> bool:
    """Whether a claim request that could take from `queue_name` came within WORKERS_SEEN_S."""
    since = (now or current_time()) - timedelta(seconds=WORKERS_SEEN_S)
    latest = ClaimScope.objects.filter(scope__in=[queue_name, EVERY_QUEUE]).aggregate(
        at=Max("seen_at")
    )["at"]
    return latest is not None and latest >= since

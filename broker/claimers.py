"""When claim requests last named each queue, for `waiting`'s `no_workers`, without slowing claims.

The first claim of a scope in each second (in this process) writes its note to ClaimScope before
it claims: one upsert, so a `GET /jobs/{id}` answered by any process right after it reads the
claim. The other claims of that second only note their scope in memory (a dict write); a daemon
thread writes those notes once a second, one upsert for every scope seen since. However many claims
a process answers, it writes at most one statement per scope a second and one more a second for the
rest. A queue has workers when a row for it, or for "*" (a claim from every queue), was seen within
WORKERS_SEEN_S.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import Q

from broker.models import ClaimScope
from broker.queue.base import current_time
from broker.wakeup import hub
from contract.conf import broker_settings
from contract.limits import WORKERS_SEEN_S

log = logging.getLogger(__name__)

EVERY_QUEUE = "*"  # cannot be a queue name
FLUSH_EVERY_S = 1.0
# Scopes remembered as written this second, at most; past it the memory starts again (a claim of
# each then writes once more), so a stream of ever-new scopes cannot grow it without bound.
MAX_WRITTEN_SCOPES = 10_000
_UPSERT = (
    'INSERT INTO "broker_claimscope" ("scope", "seen_at") VALUES {rows}'
    ' ON CONFLICT ("scope") DO UPDATE SET "seen_at" = excluded."seen_at"'
    ' WHERE "broker_claimscope"."seen_at" < excluded."seen_at"'
)


class ClaimLog:
    """This process's notes of claim scopes, and the thread that writes them."""

    def __init__(self, write_every_s: float = FLUSH_EVERY_S) -> None:
        """write_every_s: how often a scope's claim writes its note itself (the first claim)."""
        self.write_every_s = write_every_s
        self._pending: dict[str, datetime] = {}
        self._written: dict[str, float] = {}  # scope -> time.monotonic() of its last own write
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def seen(self, queues: list[str] | None) -> None:
        """Note a claim request for `queues` (None: every queue): a scope not written this
        second is written now, in one statement; the rest are noted in memory."""
        now, tick = current_time(), time.monotonic()
        due: dict[str, datetime] = {}
        # While the database is away a write would wait for a pooled connection as long as the
        # pool lets it: the notes wait in memory for the thread instead.
        away = hub.away
        with self._lock:
            if len(self._written) > MAX_WRITTEN_SCOPES:
                self._written.clear()
            for scope in queues or (EVERY_QUEUE,):
                if away or tick - self._written.get(scope, -math.inf) < self.write_every_s:
                    self._pending[scope] = now
                else:
                    self._written[scope] = tick
                    due[scope] = now
        if due:
            try:
                self._write(due)
            except DatabaseError as exc:  # the claim that follows meets the same trouble
                log.warning("could not record claim scopes: %s", exc)
                with self._lock:
                    self._pending.update(due)
        if broker_settings.BROKER_CLAIM_LOG_THREAD and (
            self._thread is None or self._pid != os.getpid()
        ):
            self._start()

    def flush(self) -> int:
        """Write the notes taken since the last flush, in one statement; returns how many."""
        tick = time.monotonic()
        with self._lock:
            pending, self._pending = self._pending, {}
            self._written = {
                scope: at for scope, at in self._written.items() if tick - at < self.write_every_s
            }
        if not pending:
            return 0
        try:
            self._write(pending)
        except DatabaseError:
            with self._lock:  # kept for the next flush, unless a newer note came meanwhile
                self._pending = {**pending, **self._pending}
            raise
        return len(pending)

    def _write(self, notes: dict[str, datetime]) -> None:
        """One upsert of `notes`; in a caller's transaction, in a savepoint of its own (a
        failure then spoils nothing of the caller's)."""
        scopes = sorted(notes)  # one lock order for every process
        params: list[Any] = []
        for scope in scopes:
            params += [scope, connection.ops.adapt_datetimefield_value(notes[scope])]
        statement = _UPSERT.format(rows=", ".join(["(%s, %s)"] * len(scopes)))
        if connection.in_atomic_block:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(statement, params)
        else:
            with connection.cursor() as cursor:
                cursor.execute(statement, params)

    def reset(self) -> None:
        """Forget the notes not yet written, and which scopes were (tests)."""
        with self._lock:
            self._pending = {}
            self._written = {}

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
            if hub.away:  # the listener reconnects first (BROKER_DB_RECONNECT_MS); then we write
                continue
            try:
                if self.flush():
                    connection.close()  # back to the pool until the next second's notes
            except Exception as exc:  # the database away: the next notes try again
                log.warning("could not record claim scopes: %s", exc)
                connection.close()


claim_log = ClaimLog()


def prune(now: datetime | None = None) -> int:
    """Delete the notes older than `waiting` reads (WORKERS_SEEN_S), so the table holds the
    scopes of the last minute, not every queue name ever claimed (the sweeper). How many went."""
    since = (now or current_time()) - timedelta(seconds=WORKERS_SEEN_S)
    deleted: int = ClaimScope.objects.filter(seen_at__lt=since).delete()[0]
    return deleted


def workers_seen(queue_name: str, now: datetime | None = None, *, every: bool = True) -> bool:
    """Whether a claim request that could take from `queue_name` came within WORKERS_SEEN_S:
    one naming it, one of every queue, or an access token's naming none, noted as its grants'
    patterns (`tenant-a.*`: a wildcard, so never a queue's name). every=False: a queue that
    claims naming no queue leave alone (SQS's CreateQueue made it): only one naming it."""
    since = (now or current_time()) - timedelta(seconds=WORKERS_SEEN_S)
    if not every:
        return ClaimScope.objects.filter(scope=queue_name, seen_at__gte=since).exists()
    scopes = ClaimScope.objects.filter(
        Q(scope__in=[queue_name, EVERY_QUEUE]) | Q(scope__contains="*") | Q(scope__contains="?"),
        seen_at__gte=since,
    ).values_list("scope", flat=True)
    return any(scope == queue_name or fnmatchcase(queue_name, scope) for scope in scopes)

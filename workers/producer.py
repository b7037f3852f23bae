"""Enqueue test work over HTTP from a few threads, and count what the broker took."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from contract.wording import counted
from workers.client import BrokerUnavailableError

log = logging.getLogger(__name__)


class Enqueuer(Protocol):
    """What produce() needs: BrokerClient.enqueue."""

    def enqueue(self, body: dict[str, Any]) -> tuple[int, Any]:
        """POST /jobs; the status and decoded answer."""
        ...

    def enqueue_many(self, bodies: Sequence[dict[str, Any]]) -> tuple[int, Any]:
        """POST /jobs/batch (all or nothing); the status and decoded answer."""
        ...


@dataclasses.dataclass(frozen=True)
class Summary:
    """What a produce run did."""

    wanted: int
    sent: int
    rejected: int
    elapsed_s: float
    interrupted: bool = False  # Ctrl-C: what was sent until then

    @property
    def ok(self) -> bool:
        """True when every task was accepted."""
        return self.sent == self.wanted

    def line(self) -> str:
        """sent N, rejected M in T s (X tasks/s); and how many were never sent, if any."""
        rate = self.sent / self.elapsed_s if self.elapsed_s > 0 else 0.0
        line = (
            f"sent {self.sent}, rejected {self.rejected} in {self.elapsed_s:.1f} s "
            f"({rate:.1f} tasks/s)"
        )
        unsent = self.wanted - self.sent - self.rejected
        if unsent:
            line += f"; {unsent} of {counted(self.wanted, 'task')} not sent"
        return f"interrupted: {line}" if self.interrupted else line


def body_template(
    *,
    fail: bool,
    max_attempts: int,
    delay_ms: int,
    queue: str,
    priority: str,
    key: str | None = None,
) -> dict[str, Any]:
    """The fields every enqueued body shares; `key` (a tenant's id, say) only when given."""
    template: dict[str, Any] = {
        "max_attempts": max_attempts,
        "delay_ms": delay_ms,
        "queue": queue,
        "priority": priority,
        "payload": {"fail": True} if fail else {},
    }
    if key is not None:
        template["key"] = key
    return template


def make_body(template: dict[str, Any], number: int) -> dict[str, Any]:
    """The body of task number: payload {"line": "hello <number>"} plus the template's fields.

    An idempotency key makes the client's retry after a 503 or a lost answer harmless: the
    broker answers a repeat with 200 and the first task's id.
    """
    return {
        **template,
        "payload": {"line": f"hello {number}", **template["payload"]},
        "idempotency_key": uuid.uuid4().hex,
    }


def produce(
    client: Enqueuer,
    n: int,
    template: dict[str, Any],
    *,
    concurrency: int = 1,
    batch: int = 1,
    progress: Callable[[int], None] | None = None,
    progress_every_s: float = 0.1,
) -> Summary:
    """Enqueue tasks 1..n from concurrency threads; progress(done) is called from this thread.

    batch 1 sends POST /jobs per task; more sends POST /jobs/batch with up to batch tasks,
    each counted sent or rejected with its request.

    Stops early (the rest counts as not sent) when the broker stays unreachable.
    """
    counts = [[0, 0] for _ in range(concurrency)]  # per thread: [sent, rejected], no lock needed
    give_up = threading.Event()
    told = threading.Lock()  # the first refusal is logged, with why; the rest only counted

    # Chunk k goes to thread k % concurrency; with batch 1 that is task k + 1.
    chunks = [range(first, min(first + batch, n + 1)) for first in range(1, n + 1, batch)]

    def send(slot: int) -> None:
        mine = counts[slot]
        for chunk in chunks[slot::concurrency]:
            if give_up.is_set():
                return
            try:
                if batch == 1:
                    status, answer = client.enqueue(make_body(template, chunk[0]))
                else:
                    status, answer = client.enqueue_many([make_body(template, k) for k in chunk])
            except BrokerUnavailableError as exc:
                log.error("%s; stopping", exc)
                give_up.set()
                return
            accepted = 200 <= status < 300
            mine[0 if accepted else 1] += len(chunk)
            if not accepted and told.acquire(blocking=False):
                log.error("%s", refusal(status, answer))

    started = time.monotonic()
    threads = [
        threading.Thread(target=send, args=(slot,), name=f"produce-{slot + 1}", daemon=True)
        for slot in range(concurrency)
    ]
    for thread in threads:
        thread.start()
    interrupted = False
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(progress_every_s)
                if progress is not None:
                    progress(sum(sent + rejected for sent, rejected in counts))
    except KeyboardInterrupt:
        # Ctrl-C: no new request; the summary counts what the broker answered until now (a
        # request in flight may still be taken, its answer unread: at most `concurrency`).
        interrupted = True
        give_up.set()
    elapsed = time.monotonic() - started
    sent = sum(c[0] for c in counts)
    return Summary(n, sent, sum(c[1] for c in counts), elapsed, interrupted)


def refusal(status: int, answer: Any) -> str:
    """Why the broker refused a task, in one line, with what to do about a missing token."""
    error = answer.get("error") if isinstance(answer, dict) else None
    line = f"the broker refused a task: {status} {error or ''}".rstrip()
    fields = answer.get("fields") if isinstance(answer, dict) else None
    if fields:
        line += f" {fields}"
    if status == 401:
        line += " (set BROKER_API_TOKEN to one of the broker's BROKER_API_TOKENS)"
    return line


def progress_bar(done: int, total: int, width: int = 30) -> str:
    """A plain text bar, e.g. "[#######.......]  50/100", for one \\r-rewritten line."""
    filled = width * done // total if total else width
    return f"[{'#' * filled}{'.' * (width - filled)}] {done:>{len(str(total))}}/{total}"

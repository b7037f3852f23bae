"""A finished task's outcome: its result checked against what the broker takes, its failure
written as the nack's error, settled, logged."""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Sequence
from types import TracebackType
from typing import Any, NamedTuple

from contract.jobtypes import InvalidPayloadError
from workers.handlers import PlainError
from workers.wire import BODY_REFUSED, MAX_ERROR_CHARS, SETTLED, Settle

log = logging.getLogger("workers.runner")

# Room for what surrounds a result in an ack body (ids, keys, a claim's fields).
ENVELOPE_BYTES = 1024
# A failure's first line (`KeyError: 'width'`) is cut here: the traceback's tail needs the rest.
SUMMARY_CHARS = 1000
# Errors whose message says it all: the worker's own (no handler, a refused payload, "fail").
_PLAIN = (PlainError, InvalidPayloadError)
# The worker's frames above a handler's, left out of its traceback.
_DISPATCH = frozenset({"workers.runner", "workers.prefetch", "workers.handlers"})


class Outcome(NamedTuple):
    """A finished task waiting for its ack (error None) or nack."""

    task_id: str
    lease_id: str
    result: Any
    error: str | None
    started: float
    job_type: str | None = None
    suspended: bool = False  # given back to wait for an event: neither acked nor nacked


def failure_text(exc: BaseException, limit: int = MAX_ERROR_CHARS) -> str:
    """A handler's exception as its nack's error: the exception's type and message on the first
    line (`KeyError: 'width'`), then its traceback from the handler's frame on, chained causes
    included; at most `limit` characters, the traceback's tail kept (it names the failing
    line). The worker's own errors (PlainError, a refused payload) are their message alone."""
    if isinstance(exc, _PLAIN):
        return (str(exc) or type(exc).__name__)[:limit]
    only = "".join(traceback.format_exception_only(exc))
    summary = only.strip() or type(exc).__name__
    if len(summary) > SUMMARY_CHARS:
        summary = summary[: SUMMARY_CHARS - 1] + "…"
    shown = traceback.TracebackException(type(exc), exc, _from_handler(exc.__traceback__))
    body = "".join(shown.format())
    if body.endswith(only):  # the last lines repeat the summary, whole: said above, cut
        body = body[: len(body) - len(only)]
    room = limit - len(summary) - 1
    if len(body) > room:
        body = "...\n" + body[len(body) - max(0, room - 4) :]
    return f"{summary}\n{body}".rstrip("\n")


def _from_handler(tb: TracebackType | None) -> TracebackType | None:
    """The traceback without the worker's own frames above the handler's."""
    while tb is not None and tb.tb_next is not None:
        if tb.tb_frame.f_globals.get("__name__") not in _DISPATCH:
            break
        tb = tb.tb_next
    return tb


def checked(result: Any, max_body_bytes: int) -> tuple[Any, str | None]:
    """(result as the broker will store it, None), or (None, why no ack can carry it).

    Whatever a handler returns must end in an ack or a nack: a result that is not JSON (NaN,
    Infinity, a set, a cycle) or too big for the broker's body limit becomes a nack saying so.
    """
    if result is None:
        return None, None
    try:
        text = json.dumps(result, allow_nan=False)  # ASCII: one character, one byte
    except Exception as exc:  # TypeError, ValueError, RecursionError, or a custom type's own
        return None, f"handler result is not JSON: {exc}"
    limit = max_body_bytes - ENVELOPE_BYTES
    if len(text) > limit:
        return None, (
            f"handler result is {len(text)} bytes of JSON, over the {limit} an ack can carry "
            f"(the broker's body limit is {max_body_bytes} bytes)"
        )
    # The JSON copy is what the broker will keep, and it encodes again whatever happens to
    # the handler's own object meanwhile.
    return json.loads(text), None


def refused_result(status: int, message: str = "") -> str:
    """The nack text for a result the broker refused to take in an ack."""
    why = "over its body limit" if status == 413 else (message or "refused")
    return f"the broker refused the handler result ({status}: {why})"


def split(outcomes: Sequence[Outcome]) -> tuple[list[Outcome], list[Settle], list[Settle]]:
    """The outcomes reordered acks first (as statuses come back), and the items to send."""
    acks = [o for o in outcomes if o.error is None and not o.suspended]
    nacks = [o for o in outcomes if o.error is not None]
    return (
        acks + nacks,
        [(o.task_id, o.lease_id, o.result) for o in acks],
        [(o.task_id, o.lease_id, o.error or "") for o in nacks],
    )


def report(ordered: Sequence[Outcome], statuses: Sequence[int]) -> list[Outcome]:
    """Log each settled outcome; return the acks refused for their result, turned into nacks."""
    renack = []
    now = time.monotonic()
    for outcome, status in zip(ordered, statuses, strict=True):
        verb = "ack" if outcome.error is None else "nack"
        if verb == "ack" and status in BODY_REFUSED:
            renack.append(outcome._replace(result=None, error=refused_result(status)))
            continue
        log_outcome(outcome, f"{verb}ed" if status == SETTLED else f"{verb} refused", now)
    return renack


def log_outcome(outcome: Outcome, said: str, now: float) -> None:
    """One line per task: "task 12 acked in 0.012 s" (INFO), or for a failure (WARNING, so the
    default log level shows it) its type and the error's first line: "task 12 (resize_image)
    nacked in 0.012 s: KeyError: 'width'"."""
    took = now - outcome.started
    if outcome.error is None:
        log.info("task %s %s in %.3f s", outcome.task_id, said, took)
        return
    first = outcome.error.partition("\n")[0]
    log.warning(
        "task %s (%s) %s in %.3f s: %s",
        outcome.task_id,
        outcome.job_type or "untyped",
        said,
        took,
        first if len(first) <= SUMMARY_CHARS else first[: SUMMARY_CHARS - 1] + "…",
    )

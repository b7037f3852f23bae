"""GET /stats/history: parse the range, read the points, answer."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from broker.api import parsing
from broker.api.base import BrokerView
from broker.api.errors import ValidationFailed
from broker.history.reading import Range, points
from broker.history.recorder import EPOCH
from broker.queue.base import current_time
from broker.tokens import access
from contract.limits import DEFAULT_HISTORY_RANGE_S, DEFAULT_HISTORY_STEP, HISTORY_STEPS

# RFC 3339's date-time: a date, a time, an offset (Z or ±hh:mm); fractions of a second allowed.
# A space before the offset is a "+" that reached the query string unescaped (`?since=` +
# `isoformat()`), which form decoding turns into a space: read as the "+" it was.
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+ -]\d\d:\d\d)", re.ASCII)

_FRACTION = re.compile(r"\.(\d+)", re.ASCII)
_LATEST = datetime(9999, 1, 1, tzinfo=UTC)


def _time(params: Any, name: str) -> datetime | None:
    raw = parsing.query_text(params, name)
    if raw is None:
        return None
    if not _RFC3339.fullmatch(raw):
        raise ValidationFailed({name: ["Must be an RFC 3339 time, like 2026-12-01T09:30:00Z."]})
    if raw[-6] == " ":
        raw = raw[:-6] + "+" + raw[-5:]
    text = raw.upper().replace("Z", "+00:00")
    # Python reads at most microseconds: a longer fraction is cut to them.
    text = _FRACTION.sub(lambda m: "." + m[1][:6].ljust(6, "0"), text)
    try:
        value = datetime.fromisoformat(text).astimezone(UTC)
    except (ValueError, OverflowError):
        raise ValidationFailed({name: ["Not a time that exists."]}) from None
    # No point is older than the epoch or newer than 9998: a range past them is the same range.
    return max(EPOCH, min(value, _LATEST))


def parse_range(params: Any) -> Range:
    """The query of GET /stats/history → Range; 400 naming each bad parameter."""
    step = parsing.query_int(params, "step", DEFAULT_HISTORY_STEP, minimum=1)
    if step not in HISTORY_STEPS:
        allowed = " or ".join(str(s) for s in HISTORY_STEPS)
        raise ValidationFailed({"step": [f"Must be {allowed} (seconds)."]})
    queue = parsing.query_text(params, "queue")
    if queue is not None:
        queue = parsing.queue_name(queue)
    until = _time(params, "until") or current_time()
    since = _time(params, "since") or max(EPOCH, until - timedelta(seconds=DEFAULT_HISTORY_RANGE_S))
    if since > until:
        raise ValidationFailed({"since": ["Must not be after until."]})
    return Range(since=since, until=until, step=step, queue=queue)


class HistoryView(BrokerView):
    """GET /stats/history: per-minute or hourly points, per queue or all."""

    grants = {"get": "read"}  # on `queue`, or on every queue without one

    def get(self, request: Request) -> Response:
        asked = parse_range(request.GET)
        if asked.queue is None:
            access.require_everywhere(request, "read")
        else:
            access.require(request, "read", asked.queue)
        return Response({"step": asked.step, "points": points(asked)})

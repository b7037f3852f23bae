"""The OpenAPI of GET /stats/history: its operation and shapes, merged into the API's by
broker/api."""

from __future__ import annotations

from broker.api.schema_components import _COUNT, _TIME, Schema, _object, ref
from broker.api.schema_operations import BAD_REQUEST, _op, _query, answer
from broker.models import HISTORY_COUNTS, HISTORY_GAUGES
from broker.states import COUNTERS
from contract import limits

_QUANTILE: Schema = {
    "type": "number",
    "minimum": 0,
    "nullable": True,
    "description": "Claim to ack/nack of the bucket's settles, in ms, interpolated in the "
    "processing histogram's buckets; null when none.",
}

COMPONENTS: dict[str, Schema] = {
    "HistoryPoint": _object(
        {
            "at": {**_TIME, "description": "The bucket's start."},
            **{
                name: {**_COUNT, "description": f"{COUNTERS[name][:-1]} in the bucket."}
                for name in HISTORY_COUNTS
            },
            **{
                name: {**_COUNT, "description": "Tasks in this state at the bucket's last sample."}
                for name in HISTORY_GAUGES
            },
            "processing_p50_ms": _QUANTILE,
            "processing_p95_ms": _QUANTILE,
        },
        ["at", *HISTORY_COUNTS, *HISTORY_GAUGES, "processing_p50_ms", "processing_p95_ms"],
    ),
    "History": _object(
        {
            "step": {"type": "integer", "enum": list(limits.HISTORY_STEPS)},
            "points": {
                "type": "array",
                "items": ref("HistoryPoint"),
                "description": "Oldest first; a bucket in which nothing was recorded is left "
                "out; the current bucket holds what has happened so far.",
            },
        },
        ["step", "points"],
    ),
}

OPERATIONS: dict[str, dict[str, Schema]] = {
    "broker.history.views.HistoryView": {
        "get": _op(
            "history",
            "What happened, minute by minute or hour by hour",
            "observability",
            {
                200: answer(
                    "Per bucket: counts of what moved, gauges sampled, processing quantiles; "
                    "over all points kept, the counts add up to the lifetime totals.",
                    ref("History"),
                ),
                400: BAD_REQUEST,
            },
            parameters=[
                _query("since", _TIME, "RFC 3339; default `until` minus an hour."),
                _query("until", _TIME, "RFC 3339; default now."),
                _query(
                    "step",
                    {"type": "integer", "enum": list(limits.HISTORY_STEPS), "default": 60},
                    "Seconds a point: 60 (kept BROKER_HISTORY_MINUTES) or 3600 (kept "
                    "BROKER_HISTORY_HOURS).",
                ),
                _query("queue", ref("QueueName"), "One queue; every queue when absent."),
            ],
        ),
    },
}

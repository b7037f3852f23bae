"""GET /metrics: Prometheus text read from the database at scrape time, so every process agrees.

Nothing is counted in process memory. Counters, per-queue gauges (the busiest 50 queues, the
rest summed as `other`) and the processing histogram are `/stats`'s, read in one statement from
the counter rows that every transition moves in its own transaction: one query per scrape, the
same whichever gunicorn worker answers, whose answer is the 50 queues' rows and the sums (the
database adds up the rest).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from django.http import HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.request import Request
from rest_framework.views import APIView

from broker import queue
from broker.api.errors import exception_handler
from broker.api.renderers import FastJSONRenderer
from broker.models import DURATION_BUCKETS
from broker.states import COUNTERS, State
from broker.tokens import access

# API.md fixes these metric names; every other counter is jobs_<counter>_total.
_RENAMED = {
    "acked": "jobs_completed",
    "buried": "jobs_dead_lettered",
    "events": "events_received",
}

# metric name (without _total): (help, the /stats totals it adds up), from states.COUNTERS.
COUNTER_METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    _RENAMED.get(name, f"jobs_{name}"): (f"{doc[:-1]} (totals.{name}).", (name,))
    for name, doc in COUNTERS.items()
}
COUNTER_METRICS["jobs_failed"] = (
    "Failed deliveries: nacks plus expired leases (totals.nacked + totals.reclaimed).",
    ("nacked", "reclaimed"),
)

# metric name: (help, state); labelled by queue
GAUGE_METRICS: dict[str, tuple[str, State]] = {
    "queue_pending_jobs": ("Tasks ready to be claimed now.", State.READY),
    "queue_running_jobs": ("Tasks handed out to a worker now.", State.HANDED_OUT),
    "queue_delayed_jobs": ("Tasks waiting out a delay or a retry backoff now.", State.DELAYED),
    "queue_dead_jobs": ("Tasks in the dead-letter queue now.", State.DEAD),
    "queue_blocked_jobs": ("Tasks waiting for the tasks they name in `after` now.", State.BLOCKED),
}

# Always shown, even when idle, so sum() over the gauges is 0 rather than "no data".
ALWAYS_SHOWN_QUEUE = "default"

# Clients name queues, and each label value is a series Prometheus keeps: the busiest queues keep
# a label of their own, every other queue is summed under OTHER_QUEUES.
MAX_QUEUE_LABELS = 50
OTHER_QUEUES = "other"


def bounded_by_queue(
    per_queue: Mapping[str, Mapping[str, int]],
    overall: Mapping[str, int],
    holding: int,
    keep: int = MAX_QUEUE_LABELS,
) -> dict[str, dict[str, int]]:
    """`{queue: {state: n}}` with at most `keep` queues of their own (the most live tasks first,
    then by name) plus OTHER_QUEUES: `overall` less the queues shown, so all the rest, any queue
    named "other" itself included, and no label value is ever shown twice. `per_queue` holds at
    least the `keep` queues holding the most tasks of the `holding` queues that hold any. The
    sums over all labels are `overall`."""
    named = sorted(
        (q for q in per_queue if q != OTHER_QUEUES),
        key=lambda q: (-sum(per_queue[q].values()), q),
    )
    bounded = {q: dict(per_queue[q]) for q in named[:keep]}
    shown = sum(1 for gauges in bounded.values() if any(gauges.values()))
    if holding > shown or OTHER_QUEUES in per_queue:
        bounded[OTHER_QUEUES] = {
            state: n - sum(gauges.get(state, 0) for gauges in bounded.values())
            for state, n in overall.items()
        }
    return bounded


class BrokerCollector(Collector):
    """Builds every metric family from the database on each collect()."""

    def collect(self) -> Iterator[Metric]:
        # One snapshot: counters, gauges and histogram agree; the busiest queues' own gauges.
        now = queue.stats(shown=MAX_QUEUE_LABELS, also=(ALWAYS_SHOWN_QUEUE,))
        totals = now["totals"]
        for name, (doc, parts) in COUNTER_METRICS.items():
            yield CounterMetricFamily(name, doc, value=sum(totals[p] for p in parts))
        per_queue = bounded_by_queue(
            {ALWAYS_SHOWN_QUEUE: {}, **now["queues"]}, now["gauges"], now["holding"]
        )
        for name, (doc, state) in GAUGE_METRICS.items():
            family = GaugeMetricFamily(name, doc, labels=["queue"])
            for queue_name in sorted(per_queue):
                family.add_metric([queue_name], per_queue[queue_name].get(state, 0))
            yield family
        yield _histogram(now["histogram"])


def _histogram(sums: dict[str, int]) -> HistogramMetricFamily:
    cumulative = 0
    buckets: list[tuple[str, float]] = []
    for bound, column in DURATION_BUCKETS:
        cumulative += sums[column]
        buckets.append((floatToGoString(bound), cumulative))
    return HistogramMetricFamily(
        "job_processing_duration_seconds",
        "Seconds from claim to ack or nack (expired leases are not observed).",
        buckets=buckets,
        sum_value=sums["dur_sum_us"] / 1_000_000,
    )


# Its own registry: no process_* or python_* metrics, which would differ between processes.
REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(BrokerCollector())


class _AnyAccept(BaseContentNegotiation):
    """Whatever the scraper's Accept says: the text format on success, JSON for errors."""

    def select_parser(self, request: Request, parsers: list[Any]) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(
        self, request: Request, renderers: list[Any], format_suffix: str | None = None
    ) -> tuple[Any, str]:
        return renderers[0], renderers[0].media_type


class MetricsView(APIView):
    """GET /metrics in the Prometheus text format (0.0.4); its OpenAPI is in broker.api.schema."""

    content_negotiation_class = _AnyAccept
    grants = {"get": "read:*"}  # as BrokerView's (broker.tokens.access)
    # Its own, not a project's REST_FRAMEWORK defaults (login, permissions, the browsable API):
    # tokens are checked before it as before every API view.
    renderer_classes = (FastJSONRenderer,)
    parser_classes = ()
    authentication_classes = ()
    permission_classes = ()
    throttle_classes = ()
    versioning_class = None

    def get_exception_handler(self) -> Any:
        return exception_handler

    def get(self, request: Request) -> HttpResponse:
        access.require_everywhere(request, "read")
        return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_PLAIN_0_0_4)

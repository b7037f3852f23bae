"""Dashboard views: the page (staff only) and /dashboard/data.json, one snapshot of the broker."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.core.cache import cache
from django.db.models import Count
from django.db.models.functions import Left
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from broker import queue, queues
from broker.api.errors import ValidationFailed, error_body
from broker.dashboard import charts, keys
from broker.dashboard.access import Sight
from broker.history import reading
from broker.history.views import parse_range
from broker.models import RESTRICTED, Queue, Task
from broker.queue import counters
from broker.queue.base import api_time
from broker.states import Priority, State

TOP_ERRORS = 5
# Errors are grouped on their first characters: a traceback's tail often differs per task.
ERROR_KEY_CHARS = 200
# Grouping every dead task's error is the one costly read here; many open dashboards share it.
TOP_ERRORS_CACHE_S = 10
TOP_ERRORS_CACHE_KEY = "broker:dashboard:top-errors"
# Running tasks listed, longest running first: the long ones are those people watch.
RUNNING_SHOWN = 20
# The parts of a snapshot a user may not view (access.Sight) are there, but empty.
DICTS = ("gauges", "queues", "queue_settings", "totals", "top_keys")
LISTS = ("top_errors", "running")
NULLS = ("invariant", "oldest_ready_age_s")
NO_COUNTS = "Your admin permissions let you view neither tasks nor queues."


def _staff_json(view: Callable[[HttpRequest], HttpResponse]) -> Callable[..., HttpResponse]:
    """Like staff_member_required, but a 403 JSON answer instead of a login page redirect."""

    @wraps(view)
    def wrapped(request: HttpRequest) -> HttpResponse:
        user = request.user
        if not (user.is_active and user.is_staff):
            return JsonResponse({"error": "Staff login required."}, status=403)
        return view(request)

    return wrapped


@staff_member_required
def index(request: HttpRequest) -> HttpResponse:
    sight = Sight.of(request)
    context = {
        **admin.site.each_context(request),
        "title": "Queue dashboard",
        "sight": sight,
        "initial": snapshot(sight),
        "data_url": reverse("dashboard:data"),
        "dlq_url": reverse("admin:broker_deadtask_changelist"),
        "blocked_url": reverse("admin:broker_task_changelist") + "?state__exact=blocked",
        "history_url": reverse("dashboard:history"),
    }
    if sight.counts:
        context.update(_charts(charts.Asked.of(request.GET)))
    return render(request, "dashboard/index.html", context)


def _charts(asked: charts.Asked) -> dict[str, Any]:
    """The history charts as the URL asks (range, queue), and the points both kinds of chart
    start from: a reload shows the past at once, not an empty chart."""
    names = queues.names()
    return {
        "asked": asked,
        "queue_names": names if not asked.queue or asked.queue in names else [*names, asked.queue],
        "ranges": charts.RANGES,
        "initial_history": charts.history(asked),
        "recent_history": charts.recent(),
    }


@_staff_json
def data(request: HttpRequest) -> JsonResponse:
    response = JsonResponse(snapshot(Sight.of(request)))
    response["Cache-Control"] = "no-store"
    return response


@_staff_json
def history(request: HttpRequest) -> JsonResponse:
    """GET /stats/history's answer, for the staff session the dashboard runs in (the API
    itself may want a bearer token); for the users who may view counts."""
    if not Sight.of(request).counts:
        return JsonResponse({"error": NO_COUNTS}, status=403)
    try:
        body = history_answer(request.GET)
    except ValidationFailed as exc:
        return JsonResponse(error_body(exc.message, exc.fields), status=400)
    response = JsonResponse(body)
    response["Cache-Control"] = "no-store"
    return response


def history_answer(params: Any) -> dict[str, Any]:
    asked = parse_range(params)
    return {"step": asked.step, "points": reading.points(asked)}


def snapshot(sight: Sight) -> dict[str, Any]:
    """Gauges, lifetime totals, the invariant, the oldest ready task's age, the top errors, the
    running tasks, and the busiest keys of the queues that go by key: those `sight` allows,
    the others empty (never read)."""
    now = timezone.now()
    shown: dict[str, Any] = {
        "now": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "now_ms": int(now.timestamp() * 1000),
        **{name: {} for name in DICTS},
        **{name: [] for name in LISTS},
        **dict.fromkeys(NULLS),
    }
    if sight.counts:
        shown.update(_counts(now))
    if sight.queues:
        shown["queue_settings"] = queue_settings()
    if sight.errors:
        shown["top_errors"] = top_errors(in_dlq=sight.dead)
    if sight.tasks:
        shown["running"] = running_tasks()
        shown["top_keys"] = keys.top_keys()
    return shown


def _counts(now: datetime) -> dict[str, Any]:
    counts = queue.stats()  # one snapshot
    overall, per_queue, totals = counts["gauges"], counts["queues"], counts["totals"]
    failed = totals["nacked"] + totals["reclaimed"]
    settled = totals["retried"] + totals["buried"]
    oldest = _oldest_ready()
    return {
        "gauges": overall,
        "queues": dict(sorted(per_queue.items())),
        "totals": totals,
        "invariant": {
            "healthy": failed == settled,
            "nacked_plus_reclaimed": failed,
            "retried_plus_buried": settled,
        },
        "oldest_ready_age_s": None if oldest is None else round((now - oldest).total_seconds(), 3),
    }


def running_tasks() -> list[dict[str, Any]]:
    """The longest-running handed-out tasks, each with its holder's last progress report."""
    rows = (
        Task.objects.filter(state=State.HANDED_OUT)
        .order_by("claimed_at", "pk")
        .values_list(
            "pk", "queue", "type", "worker", "attempts", "claimed_at", "progress_fraction",
            "progress_message", "progress_at",
        )[:RUNNING_SHOWN]
    )  # fmt: skip
    return [
        {
            "id": str(pk), "queue": queue_name, "type": type_, "worker": worker,
            "attempts": attempts, "claimed_at": api_time(claimed_at),
            "claimed_ms": int(claimed_at.timestamp() * 1000) if claimed_at else None,
            "progress": None if at is None else
            {"fraction": fraction, "message": message, "at": api_time(at)},
            "url": reverse("admin:broker_task_change", args=[pk]),
        }
        for pk, queue_name, type_, worker, attempts, claimed_at, fraction, message, at in rows
    ]  # fmt: skip


def queue_settings() -> dict[str, dict[str, Any]]:
    """The queues that are paused, limited, or go by key, with those settings: the first
    SHOWN_QUEUES by name (clients may set thousands)."""
    rows = Queue.objects.filter(RESTRICTED | keys.KEYED).order_by("name")[: counters.SHOWN_QUEUES]
    return {
        row.name: {
            "paused": row.paused, "max_in_flight": row.max_in_flight,
            "rate_per_s": row.rate_per_s, "fair": row.fair,
            "key_max_in_flight": row.key_max_in_flight, "ordered": row.ordered,
        }
        for row in rows
    }  # fmt: skip


def _oldest_ready() -> datetime | None:
    # One index probe per priority (the claim index leads with priority), not a scan of all
    # ready tasks for their minimum.
    firsts = [
        Task.objects.ready()
        .filter(priority=p)
        .order_by("available_at")
        .values_list("available_at", flat=True)
        .first()
        for p in Priority.values
    ]
    return min((t for t in firsts if t is not None), default=None)


def top_errors(in_dlq: bool = True) -> list[dict[str, Any]]:
    """The most common errors among dead tasks, each with a link to the DLQ filtered on it (or,
    for who may not view the DLQ, to the dead tasks among all tasks)."""
    cached = cache.get(TOP_ERRORS_CACHE_KEY)
    if cached is None:
        rows = (
            Task.objects.dead()
            .annotate(error_head=Left("last_error", ERROR_KEY_CHARS))
            .values("error_head")
            .annotate(n=Count("pk"))
            .order_by("-n", "error_head")[:TOP_ERRORS]
        )
        cached = [(row["error_head"], row["n"]) for row in rows]
        cache.set(TOP_ERRORS_CACHE_KEY, cached, TOP_ERRORS_CACHE_S)
    if in_dlq:
        listed, dead = reverse("admin:broker_deadtask_changelist"), {}
    else:
        listed, dead = reverse("admin:broker_task_changelist"), {"state__exact": State.DEAD}
    return [
        {
            "error": key,
            "count": n,
            "dlq_url": f"{listed}?{urlencode({**dead, **_error_lookup(key)})}",
        }
        for key, n in cached
    ]


def _error_lookup(key: str | None) -> dict[str, str]:
    if key is None:
        return {"last_error__isnull": "True"}
    if len(key) < ERROR_KEY_CHARS:
        return {"last_error__exact": key}
    return {"last_error__startswith": key}

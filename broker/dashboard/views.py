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

from broker import queue
from broker.models import RESTRICTED, Queue, Task
from broker.states import Priority

TOP_ERRORS = 5
# Errors are grouped on their first characters: a traceback's tail often differs per task.
ERROR_KEY_CHARS = 200
# Grouping every dead task's error is the one costly read here; many open dashboards share it.
TOP_ERRORS_CACHE_S = 10
TOP_ERRORS_CACHE_KEY = "broker:dashboard:top-errors"


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
    context = {
        **admin.site.each_context(request),
        "title": "Queue dashboard",
        "initial": snapshot(),
        "data_url": reverse("dashboard:data"),
        "dlq_url": reverse("admin:broker_deadtask_changelist"),
    }
    return render(request, "dashboard/index.html", context)


@_staff_json
def data(request: HttpRequest) -> JsonResponse:
    response = JsonResponse(snapshot())
    response["Cache-Control"] = "no-store"
    return response


def snapshot() -> dict[str, Any]:
    """Gauges, lifetime totals, the invariant, the oldest ready task's age and the top errors."""
    counts = queue.stats()  # one snapshot
    overall, per_queue, totals = counts["gauges"], counts["queues"], counts["totals"]
    now = timezone.now()
    failed = totals["nacked"] + totals["reclaimed"]
    settled = totals["retried"] + totals["buried"]
    oldest = _oldest_ready()
    return {
        "now": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "now_ms": int(now.timestamp() * 1000),
        "gauges": overall,
        "queues": dict(sorted(per_queue.items())),
        "queue_settings": queue_settings(),
        "totals": totals,
        "invariant": {
            "healthy": failed == settled,
            "nacked_plus_reclaimed": failed,
            "retried_plus_buried": settled,
        },
        "oldest_ready_age_s": None if oldest is None else round((now - oldest).total_seconds(), 3),
        "top_errors": top_errors(),
    }


def queue_settings() -> dict[str, dict[str, Any]]:
    """The queues that are paused or limited, by name, with those settings."""
    rows = Queue.objects.filter(RESTRICTED).order_by("name")
    return {
        row.name: {
            "paused": row.paused, "max_in_flight": row.max_in_flight,
            "rate_per_s": row.rate_per_s,
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


def top_errors() -> list[dict[str, Any]]:
    """The most common errors among dead tasks, each with a link to the DLQ filtered on it."""
    cached = cache.get(TOP_ERRORS_CACHE_KEY)
    if cached is None:
        rows = (
            Task.objects.dead()
            .annotate(key=Left("last_error", ERROR_KEY_CHARS))
            .values("key")
            .annotate(n=Count("pk"))
            .order_by("-n", "key")[:TOP_ERRORS]
        )
        cached = [(row["key"], row["n"]) for row in rows]
        cache.set(TOP_ERRORS_CACHE_KEY, cached, TOP_ERRORS_CACHE_S)
    dlq = reverse("admin:broker_deadtask_changelist")
    return [
        {"error": key, "count": n, "dlq_url": f"{dlq}?{urlencode(_error_lookup(key))}"}
        for key, n in cached
    ]


def _error_lookup(key: str | None) -> dict[str, str]:
    if key is None:
        return {"last_error__isnull": "True"}
    if len(key) < ERROR_KEY_CHARS:
        return {"last_error__exact": key}
    return {"last_error__startswith": key}

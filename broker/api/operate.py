"""Operating queues: GET/PATCH /queues, and /schedules (API.md: "Queues", "Schedules")."""

from __future__ import annotations

import json
from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from broker import queues, schedules
from broker.api import parsing
from broker.api.base import BrokerView, under
from broker.api.errors import ValidationFailed
from broker.api.representation import timestamp
from broker.models import Schedule
from broker.tokens import access
from contract.limits import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, QUEUE_RE


class QueuesView(BrokerView):
    """GET /queues: every queue a task or a setting named, with its settings and gauges, newest
    named first, paged as GET /jobs."""

    grants = {"get": "read"}

    def get(self, request: Request) -> Response:
        listed = access.visible_names(request, queues.listed(), "read")
        page, next_url = parsing.newest_first(request, listed, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        return Response({"results": queues.describe_many([q.name for q in page]), "next": next_url})


class QueueView(BrokerView):
    """GET /queues/{name}; PATCH changes its settings (a new name creates them)."""

    http_method_names = ("get", "head", "patch", "options")
    grants = {"get": "read", "patch": "manage"}

    def get(self, request: Request, name: str) -> Response:
        if queues.name_problems(name):
            raise queues.QueueNotFound()  # no task could ever have named it
        access.require_queue(request, "read", name, queues.QueueNotFound)
        return Response(queues.describe(name))

    def patch(self, request: Request, name: str) -> Response:
        access.require(request, "manage", name)
        body = parsing.read_object(request)
        try:
            return Response(queues.update(name, body))
        except queues.SettingsError as exc:
            raise ValidationFailed(exc.fields) from exc


def schedule_body(schedule: Schedule) -> dict[str, Any]:
    """API.md's <schedule>."""
    return {
        "name": schedule.name,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "every_s": schedule.every_s,
        "job": json.loads(schedule.job),
        "paused": schedule.paused,
        "next_run_at": timestamp(schedule.next_run_at),
        "last_run_at": timestamp(schedule.last_run_at),
        "last_task_id": None if schedule.last_task_id is None else str(schedule.last_task_id),
    }


def _checked(call: Any, *args: Any) -> Schedule:
    try:
        result: Schedule = call(*args)
    except schedules.ScheduleError as exc:
        raise ValidationFailed(exc.fields) from exc
    return result


def job_queue(job: Any) -> str | None:
    """The queue a schedule's job (its enqueue body) names; None when it names none that
    could be one (the body's own check then answers 400)."""
    queue = job.get("queue", "default") if isinstance(job, dict) else "default"
    return queue if isinstance(queue, str) and QUEUE_RE.fullmatch(queue) else None


def _require_schedule(request: Request, schedule: Schedule) -> None:
    """Schedules are managed on their job's queue; one no grant names is unknown (404)."""
    name = job_queue(json.loads(schedule.job))
    if name is not None:
        access.require_queue(request, "manage", name, schedules.ScheduleNotFound)


class SchedulesView(BrokerView):
    """POST /schedules creates one; GET lists them by name."""

    grants = {"post": "manage", "get": "manage"}

    def post(self, request: Request) -> Response:
        body = parsing.read_object(request)
        name = job_queue(body.get("job"))
        if name is not None:
            access.require(request, "manage", name)
        schedule = _checked(schedules.create, body)
        return Response(
            schedule_body(schedule), status=201, headers={"Location": under(request, schedule.name)}
        )

    def get(self, request: Request) -> Response:
        mine = access.of(request)
        every = access.listed_patterns(request, "manage") is None
        shown = [
            schedule_body(s)
            for s in Schedule.objects.order_by("name")
            if every or mine.may("manage", job_queue(json.loads(s.job)) or "")
        ]
        return Response({"results": shown})


class ScheduleView(BrokerView):
    """GET, PATCH and DELETE /schedules/{name}."""

    http_method_names = ("get", "head", "patch", "delete", "options")
    grants = {"get": "manage", "patch": "manage", "delete": "manage"}

    def get(self, request: Request, name: str) -> Response:
        schedule = schedules.get(name)
        _require_schedule(request, schedule)
        return Response(schedule_body(schedule))

    def patch(self, request: Request, name: str) -> Response:
        body = parsing.read_object(request)
        _require_schedule(request, schedules.get(name))
        if "job" in body and (queue := job_queue(body["job"])) is not None:
            access.require(request, "manage", queue)
        return Response(schedule_body(_checked(schedules.update, name, body)))

    def delete(self, request: Request, name: str) -> Response:
        parsing.no_body(request)
        _require_schedule(request, schedules.get(name))
        schedules.delete(name)
        return Response(status=204)

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
from contract.limits import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE


class QueuesView(BrokerView):
    """GET /queues: every queue a task or a setting named, with its settings and gauges, newest
    named first, paged as GET /jobs."""

    def get(self, request: Request) -> Response:
        page, next_url = parsing.newest_first(
            request, queues.listed(), DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
        )
        return Response({"results": queues.describe_many([q.name for q in page]), "next": next_url})


class QueueView(BrokerView):
    """GET /queues/{name}; PATCH changes its settings (a new name creates them)."""

    http_method_names = ("get", "head", "patch", "options")

    def get(self, request: Request, name: str) -> Response:
        if queues.name_problems(name):
            raise queues.QueueNotFound()  # no task could ever have named it
        return Response(queues.describe(name))

    def patch(self, request: Request, name: str) -> Response:
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


class SchedulesView(BrokerView):
    """POST /schedules creates one; GET lists them by name."""

    def post(self, request: Request) -> Response:
        schedule = _checked(schedules.create, parsing.read_object(request))
        return Response(
            schedule_body(schedule), status=201, headers={"Location": under(request, schedule.name)}
        )

    def get(self, request: Request) -> Response:
        return Response({"results": [schedule_body(s) for s in Schedule.objects.order_by("name")]})


class ScheduleView(BrokerView):
    """GET, PATCH and DELETE /schedules/{name}."""

    http_method_names = ("get", "head", "patch", "delete", "options")

    def get(self, request: Request, name: str) -> Response:
        return Response(schedule_body(schedules.get(name)))

    def patch(self, request: Request, name: str) -> Response:
        body = parsing.read_object(request)
        return Response(schedule_body(_checked(schedules.update, name, body)))

    def delete(self, request: Request, name: str) -> Response:
        parsing.no_body(request)
        schedules.delete(name)
        return Response(status=204)

"""The HTTP API: each view parses, calls one `broker.queue` function, and serializes."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.http import HttpRequest
from rest_framework.request import Request
from rest_framework.response import Response

from broker import queue, waiting
from broker.api import parsing
from broker.api.base import BrokerView, under
from broker.api.errors import error_body
from broker.api.representation import delivery, timestamp
from broker.exceptions import (
    DatabaseUnavailable,
    NotInDeadLetterQueue,
    TaskNotFound,
    TaskNotHeld,
)
from broker.longpoll import claim_wait, parking_of, socket_gone
from broker.models import Task
from broker.tokens import access
from broker.wakeup import hub

WORKER_HEADER = "HTTP_X_BROKER_WORKER"
_WAITING_STATES = frozenset(waiting.WAITING_STATES)


def _task_pk(raw: str) -> int:
    pk = parsing.task_id(raw)
    if pk is None:
        raise TaskNotFound()
    return pk


def worker_identity(request: HttpRequest) -> str | None:
    value = request.META.get(WORKER_HEADER)
    # U+0000 would make PostgreSQL refuse the claim's UPDATE (a 503): it is only a label.
    return value.replace("\x00", "\ufffd")[:255] if value else None


class JobsView(BrokerView):
    """POST /jobs enqueues; GET /jobs lists."""

    grants = {"post": "produce", "get": "read"}

    def post(self, request: Request) -> Response:
        spec = access.enqueue_spec(request, parsing.parse_enqueue(parsing.read_object(request)))
        access.check_after(request, [spec], "")
        done = queue.enqueue_answer(spec)
        body: dict[str, Any] = {"id": str(done.pk)}
        if done.deduplicated:
            body["deduplicated"] = True
            if done.replaced:
                body["replaced"] = True
        status = 201 if done.created else 200
        return Response(body, status=status, headers={"Location": under(request, done.pk)})

    def get(self, request: Request) -> Response:
        from broker.api.listing import list_tasks

        return list_tasks(request, access.visible(request, Task.objects.all()))


class ClaimView(BrokerView):
    """GET /jobs/next: the long-poll claim."""

    # Not HEAD: Django would answer it with get(), handing out a task whose body nobody reads.
    http_method_names = ("get", "options")
    grants = {"get": "consume"}

    def get(self, request: Request) -> Response:
        params = request.GET
        wait_ms = parsing.query_int(
            params, "wait_ms", parsing.DEFAULT_WAIT_MS, cap=parsing.MAX_WAIT_MS
        )
        lease_ms = parsing.query_int(
            params, "lease_ms", parsing.DEFAULT_LEASE_MS, minimum=1, cap=parsing.MAX_LEASE_MS
        )
        queues = access.claim_scope(request, parsing.queue_list(params.get("queue")))
        got = claim_wait(
            queues,
            lease_ms=lease_ms,
            wait_ms=wait_ms,
            worker=worker_identity(request),
            gone=socket_gone(request.META.get("gunicorn.socket")),
            parking=parking_of(request.META),
        )
        if not got:
            return Response(status=204)
        return Response(delivery(got[0]))


class _SettleView(BrokerView):
    """POST /jobs/{id}/ack or /nack: `extra` is the body field each may carry."""

    extra = ""
    grants = {"post": "consume"}

    def post(self, request: Request, task_id: str) -> Response:
        body = parsing.read_object(request, required=False)
        parsing.only_fields(body, {"lease_id", self.extra})
        lease_id = parsing.lease_id_from(request, body)
        value = body.get(self.extra)
        if self.extra == "error" and not isinstance(value, str | None):
            raise parsing.ValidationFailed({"error": ["Must be a string."]})
        pk = _task_pk(task_id)
        access.require_task(request, "consume", pk, TaskNotHeld)
        item = [(pk, lease_id, value)]
        (answer,) = queue.settle(item, []) if self.extra == "result" else queue.settle([], item)
        if answer.error is not None:
            raise answer.error()
        return Response(status=204)


class AckView(_SettleView):
    extra = "result"


class NackView(_SettleView):
    extra = "error"


def _lease_ms(request: Request, body: dict[str, Any]) -> int | None:
    """lease_ms from the query or the body (None when neither gives it), capped as a claim's."""
    params: dict[str, Any] = {"lease_ms": request.GET.get("lease_ms")}
    if "lease_ms" in body:
        params["lease_ms"] = str(body["lease_ms"]) if type(body["lease_ms"]) is int else "x"
    if params["lease_ms"] is None:
        return None
    return parsing.query_int(params, "lease_ms", 0, minimum=1, cap=parsing.MAX_LEASE_MS)


class ExtendView(BrokerView):
    grants = {"post": "consume"}

    def post(self, request: Request, task_id: str) -> Response:
        body = parsing.read_object(request, required=False)
        parsing.only_fields(body, {"lease_id", "lease_ms"})
        lease_id = parsing.lease_id_from(request, body)
        lease_ms = _lease_ms(request, body) or parsing.DEFAULT_LEASE_MS
        pk = _task_pk(task_id)
        access.require_task(request, "consume", pk, TaskNotHeld)
        deadline = queue.extend(pk, lease_id=lease_id, lease_ms=lease_ms)
        return Response({"deadline": timestamp(deadline)})


class ProgressView(BrokerView):
    """POST /jobs/{id}/progress: the holder reports how far it got, and may extend its lease."""

    grants = {"post": "consume"}

    def post(self, request: Request, task_id: str) -> Response:
        body = parsing.read_object(request)
        parsing.only_fields(body, {"lease_id", "lease_ms", *parsing.REPORT_FIELDS})
        lease_id = parsing.lease_id_from(request, body)
        lease_ms = _lease_ms(request, body)
        report = parsing.parse_progress(body)
        pk = _task_pk(task_id)
        access.require_task(request, "consume", pk, TaskNotHeld)
        deadline = queue.progress(pk, lease_id=lease_id, report=report, lease_ms=lease_ms)
        return Response({"deadline": timestamp(deadline)})


class TaskView(BrokerView):
    """GET /jobs/{id} shows one task; DELETE cancels it."""

    grants = {"get": "read", "delete": "manage"}

    def get(self, request: Request, task_id: str) -> Response:
        from broker.api.listing import one_task

        pk = _task_pk(task_id)
        access.require_task(request, "read", pk)
        body = one_task(pk)
        body["waiting"] = waiting.explain(pk) if body["state"] in _WAITING_STATES else None
        return Response(body)

    def delete(self, request: Request, task_id: str) -> Response:
        parsing.no_body(request)
        pk = _task_pk(task_id)
        access.require_task(request, "manage", pk)
        queue.cancel(pk)
        return Response(status=204)


class StatsView(BrokerView):
    grants = {"get": "read:*"}

    def get(self, request: Request) -> Response:
        now = queue.stats()  # one snapshot: the gauges always add up to the totals
        return Response({**now["gauges"], "totals": now["totals"], "queues": now["queues"]})


class DeadLetterView(BrokerView):
    grants = {"get": "read"}

    def get(self, request: Request) -> Response:
        from broker.api.listing import list_tasks

        tasks = access.visible(request, Task.objects.dead())
        return list_tasks(request, tasks, allow_filters=("queue", "type"))


class RequeueView(BrokerView):
    grants = {"post": "manage"}

    def post(self, request: Request, task_id: str) -> Response:
        parsing.no_body(request)
        pk = _task_pk(task_id)
        access.require_task(request, "manage", pk, NotInDeadLetterQueue)
        queue.requeue(pk)
        return Response(status=204)


def _database_answers() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:  # whatever the driver raises, the answer is the same: unavailable
        return False
    return True


class HealthView(BrokerView):
    grants = {"get": "open"}

    def get(self, request: Request) -> Response:
        # While this process's listener knows PostgreSQL is away, say so at once: a query would
        # wait BROKER_DB_POOL_TIMEOUT (8 s) for a connection, past a load balancer's timeout.
        if not hub.away and _database_answers():
            return Response({"status": "ok"})
        unavailable = DatabaseUnavailable()
        body = {**error_body(unavailable.message), "status": "unavailable"}
        return Response(body, status=unavailable.status_code)

"""The API's guards around each view, for a Django project of yours (broker.urls).

The bundled project runs them as middleware on its own stack (queueproject/settings.py: the Host
check, BROKER_MAX_BODY_BYTES, bearer tokens, JSON for every error). A project that includes
broker.urls under a prefix has its own middleware and error handlers, so each API view of
broker.urls is wrapped in the same checks instead: the same answers under any prefix, whatever
the project's handler404/500, REST_FRAMEWORK defaults or ATOMIC_REQUESTS.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern

from broker.api.middleware import api_refusal, exception_answer, json_answer

View = Callable[..., HttpResponse]


def guarded(view: View, *, open_path: bool = False, sqs: bool = False) -> View:
    """`view` behind the API's checks. `open_path`: no token needed (/healthz); `sqs`: its own
    body limit and signatures (broker/sqs), only the Host check and JSON errors here."""

    @functools.wraps(view)
    def guarded_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            request.get_host()  # a Host not in ALLOWED_HOSTS: 400 (DNS rebinding)
            refused = None if sqs else api_refusal(request, open_path)
            response = refused if refused is not None else view(request, *args, **kwargs)
            if response.status_code >= 400 and not getattr(response, "is_rendered", True):
                response.render()  # DRF's answer, rendered later by Django: its type is known now
        except Exception as exc:  # not broker.parking's Parked, a BaseException
            response = exception_answer(request, exc)
        return json_answer(response)

    # Each API call manages its own transactions: never inside a project's ATOMIC_REQUESTS one
    # (a claim's lock held until the answer, a parked claim's whole wait). A bearer-token API
    # wants no login (Django's LoginRequiredMiddleware) and no CSRF token (DRF's views and the
    # SQS endpoint are csrf_exempt already; wraps() carries that over).
    guarded_view.login_required = False  # type: ignore[attr-defined]
    return transaction.non_atomic_requests(guarded_view)


def guard_all(
    patterns: list[Any], *, sqs: bool = False, open_routes: frozenset[str] = frozenset()
) -> list[URLPattern]:
    """URL patterns with each view guarded (`open_routes`: the routes needing no token)."""
    return [
        URLPattern(
            p.pattern,
            guarded(p.callback, open_path=str(p.pattern) in open_routes, sqs=sqs),
            p.default_args,
            p.name,
        )
        for p in patterns
    ]

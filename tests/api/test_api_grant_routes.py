"""Every route of the URL configuration by every action class: each method declares the grant it
needs (a new route without one fails here, named), and a token holding that action on every
queue is let through while one holding every other action is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from broker.models import Task
from broker.sqs import protocol
from broker.tokens import making, sqskeys
from broker.tokens.grants import ACTIONS

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "put", "patch", "delete")
# Routes that are no API view of their own: pages for people (session login), the index and
# icon (no data), the OpenAPI schema (what the API is, not what it holds), and the SQS endpoint,
# whose actions have their own table (sqskeys.ACTIONS, checked below).
NOT_GRANTED = {"admin/", "dashboard/", "api/docs", "", "favicon.ico", "api/schema", "sqs"}


def _routes(patterns: list[Any] | None = None, prefix: str = "") -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for p in patterns if patterns is not None else get_resolver().url_patterns:
        route = prefix + str(p.pattern).lstrip("^").rstrip("$").rstrip("/?")
        if isinstance(p, URLResolver):
            if route.startswith(("admin", "dashboard")):
                continue
            found += _routes(p.url_patterns, route)
        elif isinstance(p, URLPattern):
            found.append((route, getattr(p.callback, "view_class", p.callback)))
    return found


def _api_methods() -> list[tuple[str, str, Any]]:
    out = []
    for route, view in _routes():
        if route in NOT_GRANTED or route.startswith(("sqs", "admin", "dashboard")):
            continue
        for method in METHODS:
            if hasattr(view, method) and method in getattr(view, "http_method_names", METHODS):
                out.append((route, method, view))
    return out


def test_every_route_method__declares_its_grant() -> None:
    missing = [
        f"{method.upper()} /{route}"
        for route, method, view in _api_methods()
        if method not in getattr(view, "grants", {})
    ]
    assert missing == [], f"routes without a grant (BrokerView.grants): {missing}"
    assert len(_api_methods()) > 30


def test_every_sqs_action__has_its_grant() -> None:
    assert set(protocol.ACTIONS) == set(sqskeys.ACTIONS)
    assert set(sqskeys.ACTIONS.values()) <= set(ACTIONS)


# -- allowed and refused, per route -------------------------------------------------------------


@pytest.fixture
def world(settings: Any) -> dict[str, str]:
    """One of everything a route can name, made with an env token, in queue q1."""
    settings.BROKER_API_TOKENS = ["env"]
    client = APIClient(headers={"Authorization": "Bearer env"})

    def post(url: str, body: Any) -> Any:
        r = client.post(url, json.dumps(body), content_type="application/json")
        assert r.status_code in (200, 201), (url, r.content)
        return r.json()

    dead = post("/jobs", {"payload": 1, "queue": "q1", "max_attempts": 1})["id"]
    claimed = client.get("/jobs/next?wait_ms=0&queue=q1").json()
    client.post(f"/jobs/{dead}/nack?lease_id={claimed['lease_id']}")
    assert Task.objects.get(pk=dead).state == "dead"
    task = post("/jobs", {"payload": 1, "queue": "q1"})["id"]
    step = {"ref": "a", "job": {"payload": 1, "queue": "q1"}}
    workflow = post("/workflows", {"name": "w", "steps": [step]})["id"]
    post("/schedules", {"name": "s1", "every_s": 60, "job": {"payload": 1, "queue": "q1"}})
    client.put("/types/t1", json.dumps({"schema": None}), content_type="application/json")
    return {"task": task, "dead": dead, "workflow": workflow}


def _request(route: str, method: str, world: dict[str, str]) -> tuple[str, Any]:
    """A concrete URL and body for a route and method, naming what `world` made."""
    url = "/" + route
    task = world["dead"] if route.startswith("dlq/") else world["task"]
    url = url.replace("<str:task_id>", task).replace("<str:workflow_id>", world["workflow"])
    if "<str:name>" in url:
        name = {"queues": "q1", "schedules": "s1", "types": "t1"}[route.split("/")[0]]
        url = url.replace("<str:name>", name)
    job = {"payload": 1, "queue": "q1"}
    bodies: dict[tuple[str, str], Any] = {
        ("jobs", "post"): job,
        ("jobs/batch", "post"): {"jobs": [job]},
        ("jobs/claim", "post"): {"wait_ms": 0, "queues": ["q1"]},
        ("jobs/ack", "post"): {"acks": [{"id": task, "lease_id": "x"}]},
        ("jobs/nack", "post"): {"nacks": [{"id": task, "lease_id": "x"}]},
        ("jobs/<str:task_id>/progress", "post"): {"fraction": 0.5},
        ("queues/<str:name>", "patch"): {"paused": False},
        ("schedules", "post"): {"name": "s2", "every_s": 60, "job": job},
        ("schedules/<str:name>", "patch"): {"paused": True},
        ("workflows", "post"): {"name": "w2", "steps": [{"ref": "a", "job": job}]},
        ("types/<str:name>", "put"): {"schema": None},
        ("jobs/<str:task_id>/wait", "post"): {"event": "e", "key": "k"},
        ("events", "post"): {"name": "e", "key": "k", "data": 1},
    }
    query = {
        "jobs/next": "?wait_ms=0&queue=q1",
        "jobs/<str:task_id>/ack": "?lease_id=x",
        "jobs/<str:task_id>/nack": "?lease_id=x",
        "jobs/<str:task_id>/extend": "?lease_id=x",
        "jobs/<str:task_id>/progress": "?lease_id=x",
        "jobs/<str:task_id>/wait": "?lease_id=x",
    }.get(route, "")
    return url + query, bodies.get((route, method))


def _status(route: str, method: str, secret: str, world: dict[str, str]) -> int:
    url, body = _request(route, method, world)
    client = APIClient(headers={"Authorization": f"Bearer {secret}"})
    if body is None:
        r = getattr(client, method)(url)
    else:
        r = getattr(client, method)(url, json.dumps(body), content_type="application/json")
    assert r.status_code < 500, (method, url, r.content)
    if route in ("jobs/ack", "jobs/nack") and r.status_code == 200:
        return int(r.json()["results"][0]["status"])  # each item answered as its single call
    if route == "jobs/claim" and r.status_code == 200 and "results" in r.json():
        return int(r.json()["results"][0]["status"])
    return int(r.status_code)


CASES = [
    (route, method, view.grants[method].partition(":")[0])
    for route, method, view in _api_methods()
    if getattr(view, "grants", {}).get(method, "open") != "open"
]


@pytest.mark.parametrize(("route", "method", "action"), CASES, ids=lambda v: str(v))
def test_route__its_action_allowed__every_other_refused(
    route: str, method: str, action: str, world: dict[str, str]
) -> None:
    allowed = making.make("allowed", [f"{action}:*"]).secret
    others = "+".join(a for a in ACTIONS if a != action)
    refused = making.make("refused", [f"{others}:*"]).secret
    assert _status(route, method, refused, world) == 403, f"{method.upper()} /{route}"
    assert _status(route, method, allowed, world) not in (401, 403), f"{method.upper()} /{route}"


@pytest.mark.parametrize(("route", "method", "action"), CASES, ids=lambda v: str(v))
def test_route__no_grant_on_the_queue__refused_or_unknown(
    route: str, method: str, action: str, world: dict[str, str]
) -> None:
    """A token whose grants name other queues only: a 403 or, for what it names in another
    queue, a 404; never the route's work."""
    stranger = making.make("stranger", ["all:elsewhere.*"]).secret
    got = _status(route, method, stranger, world)
    # An event belongs to no queue: a token that may produce somewhere posts it, and it releases
    # only its own queues' waits (tests/api/test_api_events.py holds that).
    posted = route == "events" and method == "post" and got == 202
    assert got in (403, 404) or (method == "get" and got == 200) or posted, (method, route, got)
    if got == 200:  # a list: cut to the token's queues, so nothing of q1
        url, _ = _request(route, method, world)
        r = APIClient(headers={"Authorization": f"Bearer {stranger}"}).get(url)
        assert r.json()["results"] == [], (route, r.json())

"""Admin pages and the dashboard under hostile query strings, object ids and selections: a 400,
a redirect or the page, never a 500 (API.md, Errors). Every registered ModelAdmin is driven,
Django's own included, on PostgreSQL and on SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.db import models
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse

import queueproject.urls  # noqa: F401 -- registers every ModelAdmin, as serving a page does
from broker import queue, queues, schedules
from broker.models import DeadTask
from broker.queue import NewTask
from tests.admin.factories import make_dead

# Each request commits on its own: a database error must not poison the ones after it.
pytestmark = pytest.mark.django_db(transaction=True)

NUL = "\x00"
HUGE = "9" * 30  # past every integer column, and past Python's C integers
FILTER_VALUES = (NUL, HUGE, "-" + HUGE, "(", "2026-02-30", "", "a" * 300)
# A lookup and a value it cannot take, tried on one field of each kind of every model.
FIELD_QUERIES = (
    ("", NUL), ("__regex", "("), ("__iregex", "[a"), ("__range", "a,b"), ("__in", f"1,{HUGE}"),
    ("__gt", HUGE), ("__year", HUGE), ("__iso_year", HUGE), ("__month", "13"),
    ("__date", "2026-02-30"), ("__contains", NUL), ("__isnull", "maybe"), ("__nope", "1"),
    ("__a__b", "1"),
)  # fmt: skip
OBJECT_IDS = (NUL, "1" + NUL, HUGE, "-1", "abc", "\u200f")
SELECTIONS = (NUL, HUGE, "abc", "-1")


def _admins() -> list[tuple[type[models.Model], admin.ModelAdmin]]:
    return sorted(admin.site._registry.items(), key=lambda pair: pair[0]._meta.label)


def _url(model: type[models.Model], page: str, *args: Any) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{page}", args=args)


@pytest.fixture
def boss() -> Client:
    """A superuser's client that answers a view's exception as the server would (a 500)."""
    user = User.objects.create_superuser("boss", password=None)
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


@pytest.fixture
def rows() -> None:
    """A row in every list: tasks (one dead), a workflow, queue settings, a schedule."""
    make_dead(1)
    queue.enqueue(NewTask(payload="{}", queue="q", key="k"))
    job = {"payload": {}}
    steps = [{"ref": "a", "job": job}, {"ref": "b", "job": job, "after": ["a"]}]
    made = Client().post(
        "/workflows", {"name": "w", "steps": steps}, content_type="application/json"
    )
    assert made.status_code == 201, made.content
    queues.update("q", {"paused": False})
    schedules.create({"name": "s", "every_s": 60, "job": {"payload": {}}})


def _list_parameters(model_admin: admin.ModelAdmin, boss: Client) -> set[str]:
    """The query parameters of every filter of a list, and of its date drill-down."""
    request = boss.get("/").wsgi_request
    request.user = User.objects.get(username="boss")
    changelist = model_admin.get_changelist_instance(request)
    found = {name for spec in changelist.filter_specs for name in spec.expected_parameters()}
    if model_admin.date_hierarchy:
        found |= {f"{model_admin.date_hierarchy}__{part}" for part in ("year", "month", "day")}
    return found


def _one_field_of_each_kind(model: type[models.Model]) -> list[Any]:
    kinds: dict[type, Any] = {}
    for field in model._meta.get_fields():
        if field.concrete or field.is_relation:
            kinds.setdefault(type(field), field)
    return list(kinds.values())


def _queries(model: type[models.Model], parameters: set[str]) -> Iterator[dict[str, str]]:
    for name in ("q", "p", "o", "all", "e", "_to_field", "_popup", NUL):
        for value in (NUL, HUGE, "abc"):
            yield {name: value}
    for name in sorted(parameters):
        for value in FILTER_VALUES:
            yield {name: value}
    for field in _one_field_of_each_kind(model):
        for lookup, value in FIELD_QUERIES:
            yield {field.name + lookup: value}
    drill = [name.removesuffix("__year") for name in parameters if name.endswith("__year")]
    for field_name in drill:
        for value in (HUGE, "-1", "0"):
            yield {f"{field_name}__year": "2026", f"{field_name}__month": value}
            yield {f"{field_name}__year": "2026", f"{field_name}__month": "2",
                   f"{field_name}__day": value}  # fmt: skip


class Pages:
    """Requests whose answers are 500s, written down; Django's "invalid filter" redirect (to
    ?e=1) is followed once per page."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.failing: list[str] = []
        self.followed: set[str] = set()

    def get(self, url: str) -> HttpResponse:
        return self._note("GET", url, self.client.get(url))

    def post(self, url: str, data: dict[str, Any]) -> HttpResponse:
        return self._note(f"POST {data}", url, self.client.post(url, data))

    def _note(self, what: str, url: str, response: HttpResponse) -> HttpResponse:
        if response.status_code >= 500:
            self.failing.append(f"{what} {url!r} -> {response.status_code}")
        location = response.get("Location", "")
        if response.status_code == 302 and location.endswith("?e=1"):
            if location not in self.followed:
                self.followed.add(location)
                self.get(location)
        return response


@pytest.mark.parametrize("label", [model._meta.label for model, _ in _admins()])
def test_every_list__hostile_query_strings__never_500(boss: Client, rows: None, label: str) -> None:
    ((model, model_admin),) = [pair for pair in _admins() if pair[0]._meta.label == label]
    pages = Pages(boss)
    for query in _queries(model, _list_parameters(model_admin, boss)):
        pages.get(f"{_url(model, 'changelist')}?{urlencode(query)}")
    assert not pages.failing, "\n".join(pages.failing)


def test_every_object_page__hostile_ids__never_500(boss: Client, rows: None) -> None:
    pages = Pages(boss)
    for model, _ in _admins():
        for object_id in OBJECT_IDS:
            for page in ("change", "history", "delete"):
                pages.get(_url(model, page, object_id))
    assert not pages.failing, "\n".join(pages.failing)


def test_every_action__hostile_selection__never_500(boss: Client, rows: None) -> None:
    pages = Pages(boss)
    request = boss.get("/").wsgi_request
    request.user = User.objects.get(username="boss")
    for model, model_admin in _admins():
        for action in model_admin.get_actions(request):
            for selected in SELECTIONS:
                data = {"action": action, "_selected_action": [selected], "index": "0"}
                pages.post(_url(model, "changelist"), data)
    assert not pages.failing, "\n".join(pages.failing)


@pytest.mark.parametrize(
    "query",
    [{"queue": NUL}, {"payload__regex": "("}, {"q": NUL}, {"attempts__in": f"1,{HUGE}"},
     {"updated_at__year": HUGE}, {"updated_at__iso_year": HUGE}, {"key": NUL}, {"type": NUL},
     {"priority": HUGE}, {"queue__range": "a,b"}],
)  # fmt: skip
def test_dlq_requeue_all_matching__hostile_filter__never_500_nothing_requeued(
    boss: Client, rows: None, query: dict[str, str]
) -> None:
    pages = Pages(boss)
    dead = DeadTask.objects.count()
    data = {"action": "requeue_all_matching", "index": "0"}
    pages.post(f"{_url(DeadTask, 'changelist')}?{urlencode(query)}", data)
    assert not pages.failing, "\n".join(pages.failing)
    assert DeadTask.objects.count() == dead


def test_dashboard__hostile_query_strings__never_500(boss: Client, rows: None) -> None:
    pages = Pages(boss)
    long_fraction = "2026-01-01T00:00:00." + "0" * 5000 + "Z"
    for page in ("/dashboard/", "/dashboard/data.json", "/dashboard/history.json"):
        for name in ("queue", "since", "until", "step", "range", NUL):
            for value in (*FILTER_VALUES, long_fraction):
                pages.get(f"{page}?{urlencode({name: value})}")
    assert not pages.failing, "\n".join(pages.failing)

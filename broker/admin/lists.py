"""Admin list pages that stay fast with a million tasks: counts, filter choices, date drill-down."""

from __future__ import annotations

import calendar
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db import DatabaseError, connection, transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import formats, timezone
from django.utils.functional import cached_property
from django.utils.text import capfirst

from broker.models import Task
from broker.states import GAUGE_STATES, State

# -- counting without a full-table COUNT ----------------------------------------------------------


class EstimatedCountPaginator(Paginator):
    """Exact counts while they are cheap; on PostgreSQL the planner's estimate past that.

    An unfiltered list reads pg_class.reltuples (no COUNT over a million rows); a filtered one
    counts under a short statement timeout and falls back to EXPLAIN's row estimate.
    """

    exact_below = 10_000
    count_timeout_ms = 150
    estimated = False  # the pagination footer says "about" when True

    @cached_property
    def count(self) -> int:
        qs = self.object_list
        if connection.vendor != "postgresql" or not isinstance(qs, QuerySet):
            return super().count
        if not qs.query.where:
            estimate = _table_estimate(qs.model._meta.db_table)
            if estimate >= self.exact_below:
                self.estimated = True
                return estimate
        try:
            with postgres_settings(statement_timeout=str(int(self.count_timeout_ms))):
                return qs.count()
        except DatabaseError:  # the timeout cancelled it: the savepoint rolled back
            self.estimated = True
            return _plan_estimate(qs)


@contextmanager
def postgres_settings(**settings: str) -> Iterator[None]:
    """PostgreSQL settings for the statements inside, the previous ones put back after.

    Transaction-local, and put back by hand: inside an outer transaction our atomic() is only a
    savepoint, and releasing one keeps what was SET in it. When a statement inside fails (a
    timeout), the savepoint's rollback undoes them.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        previous = {}
        for name, value in settings.items():
            cursor.execute("SELECT current_setting(%s)", [name])
            previous[name] = cursor.fetchone()[0]
            cursor.execute("SELECT set_config(%s, %s, true)", [name, value])
        yield
        for name, value in previous.items():
            cursor.execute("SELECT set_config(%s, %s, true)", [name, value])


def _table_estimate(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [table])
        row = cursor.fetchone()
    return max(int(row[0]), 0) if row else 0  # -1 means "never analyzed"


def _plan_estimate(qs: QuerySet) -> int:
    sql, params = qs.order_by().values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


# -- filters that never scan the table ------------------------------------------------------------


RECENT_TASKS = 1000


def known_queues(states: tuple[str, ...] = tuple(GAUGE_STATES), recent: bool = True) -> list[str]:
    """Queue names worth offering: every queue with a task in `states`, plus, when `recent`,
    those among the newest tasks (finished ones included). No scan of the whole table.
    """
    names = set(_queues_in(states))
    if recent:
        newest = Task.objects.order_by("-pk").values_list("queue", flat=True)[:RECENT_TASKS]
        names.update(newest)
    return sorted(names)


def _queues_in(states: tuple[str, ...]) -> list[str]:
    live = Task.objects.filter(state__in=states)
    if connection.vendor != "postgresql":
        return list(live.values_list("queue", flat=True).distinct())
    # A loose index scan of the partial (queue, state) index on the live states: one probe per
    # distinct queue, not one per row. The states are written in (they are our enum's values,
    # not input) so the planner can prove the index's condition, which a parameter hides.
    if not set(states) <= set(State.values):
        raise ValueError(f"not task states: {states}")
    among = "state IN ({})".format(", ".join(f"'{state}'" for state in states))
    table = Task._meta.db_table
    sql = f"""
        WITH RECURSIVE names(queue) AS (
            (SELECT queue FROM {table} WHERE {among} ORDER BY queue LIMIT 1)
            UNION ALL
            SELECT (SELECT t.queue FROM {table} t WHERE t.{among} AND t.queue > names.queue
                    ORDER BY t.queue LIMIT 1)
            FROM names WHERE names.queue IS NOT NULL
        )
        SELECT queue FROM names WHERE queue IS NOT NULL
    """  # noqa: S608 -- table and states are ours, checked above
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [row[0] for row in cursor.fetchall()]


class QueueFilter(admin.SimpleListFilter):
    """Queues with live tasks and recent ones; any other still filters by ?queue=name."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = set(known_queues(*model_admin.queue_choices_from))
        if self.value():
            names.add(self.value())  # a chosen queue stays visible as the selected choice
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(queue=self.value()) if self.value() else queryset


class KeyFilter(admin.SimpleListFilter):
    """?key=acme: one key's tasks (GET /jobs?key='s index). Keys are too many to offer as
    choices; a task's key in the list links here, and the chosen one shows to be cleared."""

    title = "key"
    parameter_name = "key"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # No choice, no filter: Django applies only filters that show.
        return [(self.value(), self.value())] if self.value() else []

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(key=self.value()) if self.value() else queryset


class UniqueKeyFilter(KeyFilter):
    """?unique_key=doc-42: the tasks of one unique key (GET /jobs?unique_key='s index); a
    task's page links here."""

    title = "unique key"
    parameter_name = "unique_key"

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(unique_key=self.value()) if self.value() else queryset


class TypeFilter(admin.SimpleListFilter):
    """Job types: the built-in ones (the contract's registry) and those of your own (JobType
    rows); the API accepts no other, so the task table is not scanned for them."""

    title = "type"
    parameter_name = "type"
    UNTYPED = "-"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        from broker.models import JobType
        from contract.jobtypes import SPECS

        names = set(SPECS) | set(JobType.objects.values_list("name", flat=True))
        return [(self.UNTYPED, "(no type)"), *((name, name) for name in sorted(names))]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == self.UNTYPED:
            return queryset.filter(type__isnull=True)
        return queryset.filter(type=self.value()) if self.value() else queryset


# -- a date drill-down without DISTINCT over the table --------------------------------------------


class TaskChangeList(ChangeList):
    """Django's date hierarchy, drawn from the table's first and last dates.

    Django's own runs MIN/MAX and SELECT DISTINCT date_trunc(...) over the filtered rows: two
    scans of a million tasks per page view. Here the bounds are the oldest and newest task by
    primary key (two index probes; ids grow with created_at), and the years, months and days
    between them are listed from the calendar. A listed day may hold no task of the current
    filter; it then shows an empty list.
    """

    multi_page: bool
    can_show_all: bool

    @cached_property
    def calendar(self) -> dict[str, Any]:
        return date_drilldown(self)

    def get_results(self, request: HttpRequest) -> None:
        """A search's first page is fetched before anything is counted: when it holds every
        match, that is the count (a COUNT of a rare term reads the whole table, only to be cut
        off and replaced by the planner's guess, "about 2,182" over an empty list).
        """
        if not (self.query and connection.vendor == "postgresql"):
            return super().get_results(request)
        per_page = self.list_per_page
        head = searched(self.queryset[: per_page + 1]) if self.page_num == 1 else None
        if head is not None and len(head) <= per_page:
            return self._one_page(request, head)
        super().get_results(request)
        if head is not None and self.multi_page and not (self.show_all and self.can_show_all):
            self.result_list = head[:per_page]
        else:
            self.result_list = searched(self.result_list)

    def _one_page(self, request: HttpRequest, page: QuerySet) -> None:
        """What ChangeList.get_results sets for a list that fits on one page, counted."""
        self.paginator = self.model_admin.get_paginator(request, self.queryset, self.list_per_page)
        self.paginator.count = self.result_count = len(page)  # a cached_property: set, not run
        self.show_full_result_count = self.model_admin.show_full_result_count
        self.full_result_count = self.root_queryset.count() if self.show_full_result_count else None
        self.show_admin_actions = not self.show_full_result_count or bool(self.full_result_count)
        self.result_list = page
        self.can_show_all = True
        self.multi_page = False


SEARCH_WALK_MS = 150


def searched(page: QuerySet) -> QuerySet:
    """A page of search results, fetched fast whether the term is common or matches nothing.

    The planner walks the primary key from the newest task and tests each row ("contains" on
    payloads and errors has no index): a common term fills the page within a few hundred rows,
    a term that matches nothing reads all of them, one at a time (1.1 s over a million tasks on
    a slow host). So the walk gets SEARCH_WALK_MS; past that, the same query without the walk
    scans the table in parallel and sorts the few matches (0.44 s there).
    """
    try:
        with postgres_settings(statement_timeout=str(SEARCH_WALK_MS)):
            len(page)  # fetched now, into the queryset's cache, which the page then reads
    except DatabaseError:  # cancelled: the savepoint rolled back, the cache is still empty
        with postgres_settings(enable_indexscan="off"):
            len(page)
    return page


def _bounds(model: type[Task], field: str) -> tuple[datetime, datetime] | None:
    by_pk = model._default_manager.values_list(field, flat=True)
    first, last = by_pk.order_by("pk").first(), by_pk.order_by("-pk").first()
    if first is None or last is None:
        return None
    first, last = timezone.localtime(first), timezone.localtime(last)
    return (first, last) if first <= last else (last, first)


def date_drilldown(cl: ChangeList) -> dict[str, Any]:
    """The context of admin/date_hierarchy.html: show, back, choices."""
    field = cl.date_hierarchy
    bounds = _bounds(cl.model, field)
    if bounds is None:
        return {"show": False}
    first, last = bounds
    year, month, day = (cl.params.get(f"{field}__{part}") for part in ("year", "month", "day"))

    def link(**chosen: int) -> str:
        return cl.get_query_string({f"{field}__{k}": v for k, v in chosen.items()}, [f"{field}__"])

    if not (year or month or day) and first.year == last.year:
        year = first.year
        month = first.month if first.month == last.month else None
    y, m, d = (int(v) if v else None for v in (year, month, day))
    if y and m and d:
        month_title = capfirst(formats.date_format(date(y, m, 1), "YEAR_MONTH_FORMAT"))
        day_title = capfirst(formats.date_format(date(y, m, d), "MONTH_DAY_FORMAT"))
        return {
            "show": True,
            "back": {"link": link(year=y, month=m), "title": month_title},
            "choices": [{"title": day_title}],
        }
    if y and m:
        days = [date(y, m, n) for n in range(1, calendar.monthrange(y, m)[1] + 1)]
        return {
            "show": True,
            "back": {"link": link(year=y), "title": str(y)},
            "choices": [
                {
                    "link": link(year=y, month=m, day=one.day),
                    "title": capfirst(formats.date_format(one, "MONTH_DAY_FORMAT")),
                }
                for one in days
                if first.date() <= one <= last.date()
            ],
        }
    if y:
        months = [date(y, n, 1) for n in range(1, 13)]
        return {
            "show": True,
            "back": {"link": link(), "title": "All dates"},
            "choices": [
                {
                    "link": link(year=y, month=one.month),
                    "title": capfirst(formats.date_format(one, "YEAR_MONTH_FORMAT")),
                }
                for one in months
                if (first.year, first.month) <= (y, one.month) <= (last.year, last.month)
            ],
        }
    return {
        "show": True,
        "back": None,
        "choices": [
            {"link": link(year=n), "title": str(n)} for n in range(first.year, last.year + 1)
        ],
    }

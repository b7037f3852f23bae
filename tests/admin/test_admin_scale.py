"""Admin list pages on PostgreSQL: no full-table COUNT, and fast with a million tasks."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from broker import queue, queues
from broker.admin import lists
from broker.admin.lists import EstimatedCountPaginator, known_queues
from broker.dashboard import keys
from broker.models import Task
from broker.states import State

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

TASKS = "/admin/broker/task/"
DLQ = "/admin/broker/deadtask/"


def _counts(captured: list[dict]) -> list[str]:
    return [q["sql"] for q in captured if "COUNT(" in q["sql"].upper()]


def test_task_list__unfiltered_big_table__estimate_no_count_query(
    admin_client: Client, enqueue_task: Callable[..., int], monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        enqueue_task()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE broker_task")
    # Pretend 3 rows is "big": the estimate path is the one a million-row table takes.
    monkeypatch.setattr(EstimatedCountPaginator, "exact_below", 1)

    with CaptureQueriesContext(connection) as queries:
        html = admin_client.get(TASKS).content.decode()

    assert _counts(queries.captured_queries) == []
    assert "about 3 tasks" in html


def test_paginator__count_over_time_limit__planner_estimate_and_connection_fine(
    enqueue_task: Callable[..., int], monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        enqueue_task(queue="mail")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE broker_task")
    monkeypatch.setattr(EstimatedCountPaginator, "count_timeout_ms", 5)
    # A filter that takes 20 ms per row: the COUNT overruns its 5 ms and is cancelled.
    slow = (
        Task.objects.filter(queue="mail").extra(where=["pg_sleep(0.02) IS NOT NULL"]).order_by("pk")
    )

    paginator = EstimatedCountPaginator(slow, 50)

    assert paginator.count >= 1  # the planner's guess, not an error page
    assert paginator.estimated is True
    assert Task.objects.filter(queue="mail").count() == 3  # the savepoint rolled back cleanly


def _setting(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting(%s)", [name])
        return cursor.fetchone()[0]


def test_paginator__exact_count_in_a_transaction__statement_timeout_put_back(
    enqueue_task: Callable[..., int],
) -> None:
    enqueue_task(queue="mail")
    # The test runs inside a transaction, as ATOMIC_REQUESTS would.
    before = _setting("statement_timeout")

    paginator = EstimatedCountPaginator(Task.objects.filter(queue="mail").order_by("pk"), 50)

    assert paginator.count == 1
    assert paginator.estimated is False
    assert _setting("statement_timeout") == before


def test_search__walk_over_time_limit__scan_finds_the_same_rows_and_settings_put_back(
    enqueue_task: Callable[..., int], monkeypatch: pytest.MonkeyPatch
) -> None:
    wanted = [enqueue_task(queue="mail") for _ in range(3)]
    enqueue_task(queue="other")
    before = (_setting("statement_timeout"), _setting("enable_indexscan"))
    monkeypatch.setattr(lists, "SEARCH_WALK_MS", 5)
    # 20 ms per row tested: the walk overruns its 5 ms and is cancelled.
    slow = Task.objects.filter(queue="mail").extra(where=["pg_sleep(0.02) IS NOT NULL"])

    page = lists.searched(slow.order_by("-pk")[:50])

    assert [task.pk for task in page] == wanted[::-1]
    assert (_setting("statement_timeout"), _setting("enable_indexscan")) == before


def test_task_list__search_matching_nothing__zero_counted_without_a_count_query(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    for _ in range(3):
        enqueue_task()

    with CaptureQueriesContext(connection) as queries:
        html = admin_client.get(TASKS, {"q": "nosuchname"}).content.decode()

    assert _counts(queries.captured_queries) == []
    assert re.search(r"\b0 tasks\b", html) and "about 0" not in html


def test_known_queues__live_and_recent__each_once(
    enqueue_task: Callable[..., int], dead: Callable[..., list[int]]
) -> None:
    for name in ("mail", "billing", "mail", "zeta", "billing"):
        enqueue_task(queue=name)
    dead(1, queue_name="reports")
    assert known_queues() == ["billing", "mail", "reports", "zeta"]
    assert known_queues((State.DEAD,), recent=False) == ["reports"]


def test_known_queues__finished_long_ago__not_offered_but_still_filterable(
    admin_client: Client, enqueue_task: Callable[..., int], monkeypatch: pytest.MonkeyPatch
) -> None:
    old = enqueue_task(queue="archive")
    queue.cancel(old)
    enqueue_task(queue="mail")
    monkeypatch.setattr("broker.admin.lists.RECENT_TASKS", 1)  # "archive" is not among the newest

    listing = admin_client.get(TASKS).content.decode()
    filtered = admin_client.get(f"{TASKS}?queue=archive").content.decode()

    assert 'href="?queue=mail"' in listing
    assert 'href="?queue=archive"' not in listing
    assert f"/admin/broker/task/{old}/change/" in filtered
    assert 'href="?queue=archive"' in filtered  # the chosen one is shown, selected


def test_dlq_queue_filter__only_queues_with_dead_tasks(
    admin_client: Client, enqueue_task: Callable[..., int], dead: Callable[..., list[int]]
) -> None:
    enqueue_task(queue="mail")
    dead(1, queue_name="billing")

    html = admin_client.get(DLQ).content.decode()

    assert 'href="?queue=billing"' in html
    assert 'href="?queue=mail"' not in html


MILLION_SQL = """
INSERT INTO broker_task (state, queue, priority, type, payload, attempts, max_attempts,
    available_at, last_error, created_at, updated_at, key)
SELECT
    CASE WHEN r < 0.90 THEN 'done' WHEN r < 0.92 THEN 'dead' WHEN r < 0.97 THEN 'ready'
         WHEN r < 0.99 THEN 'delayed' ELSE 'cancelled' END,
    'q' || (g % 8), (g % 3)::smallint, NULL, '{"n": ' || g || '}', 1, 3, ts,
    CASE WHEN r >= 0.90 AND r < 0.92 THEN 'error kind ' || (g % 7) END,
    ts, ts + interval '1 second', CASE WHEN g / 8 % 2 = 0 THEN 'tenant-' || (g / 8 % 500) END
FROM (SELECT g, random() AS r, now() - interval '40 days' * (1000000 - g) / 1000000.0 AS ts
      FROM generate_series(1, 1000000) g) s
"""


@pytest.mark.slow
def test_admin_pages__million_tasks__each_under_a_second(admin_client: Client) -> None:
    # Rows written straight in: a fixture of finished history, not transitions under test.
    with connection.cursor() as cursor:
        cursor.execute(MILLION_SQL)
        cursor.execute("ANALYZE broker_task")
    for name in ("q0", "q1", "q2", "q3"):  # the dashboard counts their keys
        queues.update(name, {"fair": True})
    pages = [
        TASKS, f"{TASKS}?state__exact=ready", f"{TASKS}?state__exact=dead", f"{TASKS}?queue=q3",
        f"{TASKS}?priority__exact=0", f"{TASKS}?type=-", f"{TASKS}?q=%23500000", f"{TASKS}?p=20",
        f"{TASKS}?q=q3", f"{TASKS}?q=nosuchname",
        DLQ, f"{DLQ}?queue=q3", f"{DLQ}?last_error__exact=error+kind+3", f"{DLQ}?q=q3",
        f"{TASKS}500000/change/", "/dashboard/data.json",
        f"{TASKS}?key=tenant-42", f"{TASKS}?queue=q2&key=tenant-42", f"{TASKS}?q=key%3Atenant-42",
        f"{TASKS}?q=tenant-42",
    ]  # fmt: skip
    slow = {}
    for url in pages:
        admin_client.get(url)  # warm the caches, as a second visit would
        with CaptureQueriesContext(connection) as queries:
            start = time.monotonic()
            response = admin_client.get(url)
            elapsed = time.monotonic() - start
        assert response.status_code == 200, url
        full_counts = [sql for sql in _counts(queries.captured_queries) if "WHERE" not in sql]
        assert full_counts == [], url
        if elapsed > 1.0:
            slow[url] = round(elapsed, 2)
    # The busiest keys' count, uncached (the page above was served from the cache).
    cache.delete(keys.TOP_KEYS_CACHE_KEY)
    start = time.monotonic()
    assert len(keys.top_keys()["q3"]["top"]) == keys.TOP_KEYS
    if time.monotonic() - start > 1.0:
        slow["top keys, uncached"] = round(time.monotonic() - start, 2)
    assert slow == {}

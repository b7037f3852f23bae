"""Unique keys in admin: a task's page shows its unique key, how many enqueues it absorbed and,
pending, when it runs; the task list filters by ?unique_key=."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse

from broker import queue
from broker.queue import NewTask, Unique

pytestmark = pytest.mark.django_db

TASKS = reverse("admin:broker_task_changelist")


def _field(html: str, name: str) -> str:
    found = re.search(rf'field-{name}">.*?<div class="readonly">(.*?)</div>', html, re.S)
    assert found is not None, f"no {name} on the page"
    return unescape(found.group(1))


def _enqueue(key: str, **unique: object) -> int:
    return queue.enqueue(NewTask(payload="1", unique=Unique(key, **unique)))[0]  # type: ignore[arg-type]


def test_task_page__debounced_holder__key_absorbed_and_when_it_runs(admin_client: Client) -> None:
    pk = _enqueue("doc 42", debounce_ms=60_000)
    for _ in range(3):
        assert _enqueue("doc 42", debounce_ms=60_000) == pk
    html = admin_client.get(reverse("admin:broker_task_change", args=[pk])).content.decode()
    shown = _field(html, "unique_holding")
    assert 'href="/admin/broker/task/?unique_key=doc+42">doc 42</a>' in shown
    assert "absorbed 3 enqueues" in shown
    assert "runs at 20" in shown  # the time it waits for, pushed by each debounce


def test_task_page__without_unique_key__empty(admin_client: Client) -> None:
    pk, _ = queue.enqueue(NewTask(payload="1"))
    html = admin_client.get(reverse("admin:broker_task_change", args=[pk])).content.decode()
    assert _field(html, "unique_holding") == "-"


def test_task_list__filter_by_unique_key(admin_client: Client) -> None:
    one = _enqueue("a")
    _enqueue("b")
    queue.enqueue(NewTask(payload="1"))
    html = admin_client.get(TASKS, {"unique_key": "a"}).content.decode()
    listed = {int(p) for p in re.findall(r"/admin/broker/task/(\d+)/change/", html)}
    assert listed == {one}

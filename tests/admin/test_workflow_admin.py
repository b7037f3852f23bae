"""Admin's workflow pages (any database): the list with its state filter, the page's graph data,
and a task's page pointing at its workflow and what it waits for."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from broker import queue
from broker.queue import NewTask

pytestmark = pytest.mark.django_db

WORKFLOWS = "/admin/broker/workflow/"


def _graph(name: str, first_fails: bool = False) -> tuple[int, dict[str, int]]:
    a = NewTask(payload="1", queue=f"{name}-a", max_attempts=1 if first_fails else 3)
    return queue.enqueue_graph(
        name, [("a", a, (), "done"), ("b", NewTask(payload="2", queue=f"{name}-b"), ("a",), "done")]
    )


def test_list__state_column_and_filter(admin_client: Client) -> None:
    _graph("running-one")
    _graph("failing-one", first_fails=True)
    (d,) = queue.claim(["failing-one-a"], 1000)
    queue.nack(d.task.pk, lease_id=d.lease_id, error="x")
    html = admin_client.get(WORKFLOWS).content.decode()
    assert "running-one" in html and "failing-one" in html
    assert "1 dead, 1 blocked" in html or "1 blocked, 1 dead" in html
    only = admin_client.get(f"{WORKFLOWS}?state=failed").content.decode()
    assert "failing-one" in only and "running-one" not in only
    assert "running-one" in admin_client.get(f"{WORKFLOWS}?state=running").content.decode()


def test_page__graph_data_every_step_and_arrow_linked(admin_client: Client) -> None:
    workflow_id, tasks = _graph("drawn")
    html = admin_client.get(f"{WORKFLOWS}{workflow_id}/change/").content.decode()
    found = re.search(
        r'<script id="workflow-graph-data" type="application/json">(.*?)</script>', html
    )
    assert found is not None
    data = json.loads(found.group(1))
    assert [(n["ref"], n["state"], n["url"]) for n in data["nodes"]] == [
        ("a", "ready", f"/admin/broker/task/{tasks['a']}/change/"),
        ("b", "blocked", f"/admin/broker/task/{tasks['b']}/change/"),
    ]
    assert data["edges"] == [{"from": str(tasks["a"]), "to": str(tasks["b"])}]
    assert "vendor/dagre-3.1.3.min.js" in html


def test_task_page__links_its_workflow_and_what_it_waits_for(admin_client: Client) -> None:
    workflow_id, tasks = _graph("linked")
    html = admin_client.get(f"/admin/broker/task/{tasks['b']}/change/").content.decode()
    assert f'href="/admin/broker/workflow/{workflow_id}/change/"' in html
    assert f'<a href="/admin/broker/task/{tasks["a"]}/change/">#{tasks["a"]}</a> (ready)' in html
    assert "blocked" in html and f"Waits for task {tasks['a']} to finish." in html

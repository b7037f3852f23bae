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


# -- following a run, durations, labels, cancelling, the DLQ's column ---------------------------


def _graph_json(client: Client, workflow_id: int) -> dict:
    r = client.get(f"{WORKFLOWS}{workflow_id}/graph.json")
    assert r.status_code == 200, r.content
    assert r["Content-Type"] == "application/json"
    assert "no-store" in r["Cache-Control"]
    return r.json()


def test_graph_json__follows_the_run_until_it_ends(admin_client: Client) -> None:
    workflow_id, _tasks = _graph("followed")
    before = _graph_json(admin_client, workflow_id)
    assert (before["state"], before["running"], before["cancellable"]) == ("running", True, True)

    (a,) = queue.claim(["followed-a"], 60_000)
    queue.ack(a.task.pk, lease_id=a.lease_id)
    (b,) = queue.claim(["followed-b"], 60_000)
    during = _graph_json(admin_client, workflow_id)
    assert [(n["ref"], n["state"], n["label"]) for n in during["nodes"]] == [
        ("a", "done", "done"),
        ("b", "handed_out", "handed out"),
    ]
    assert during["steps_by_state"] == "1 handed out, 1 done"
    assert during["nodes"][1]["colour"] == "#fb8c00"

    queue.ack(b.task.pk, lease_id=b.lease_id)
    after = _graph_json(admin_client, workflow_id)
    assert (after["state"], after["running"], after["cancellable"]) == ("succeeded", False, False)
    assert {n["state"] for n in after["nodes"]} == {"done"}


def test_graph_json__durations__from_the_claim_to_the_end(
    admin_client: Client, monkeypatch
) -> None:
    from datetime import timedelta
    from types import SimpleNamespace

    from django.utils import timezone

    workflow_id, _tasks = _graph("timed")
    start = timezone.now()
    clock = [start]
    monkeypatch.setattr(queue.base, "timezone", SimpleNamespace(now=lambda: clock[0]))
    (a,) = queue.claim(["timed-a"], 600_000)
    clock[0] = start + timedelta(seconds=75, milliseconds=400)
    queue.ack(a.task.pk, lease_id=a.lease_id)
    (_b,) = queue.claim(["timed-b"], 600_000)
    clock[0] = start + timedelta(seconds=76, milliseconds=650)

    nodes = _graph_json(admin_client, workflow_id)["nodes"]

    assert (nodes[0]["duration_ms"], nodes[0]["duration"]) == (75_400, "1 min 15 s")
    assert (nodes[1]["duration_ms"], nodes[1]["duration"]) == (1250, "1.2 s")  # running: to now


def test_graph_json__blocked_step__no_duration(admin_client: Client) -> None:
    workflow_id, _ = _graph("waiting")
    nodes = _graph_json(admin_client, workflow_id)["nodes"]
    assert [n["duration"] for n in nodes] == [None, None]


@pytest.mark.parametrize("bad", ["999999", "x", "%00", "1" * 30])
def test_graph_json__unknown_workflow__404_json(admin_client: Client, bad: str) -> None:
    r = admin_client.get(f"{WORKFLOWS}{bad}/graph.json")
    assert r.status_code == 404
    assert r.json() == {"error": "No such workflow."}


def test_graph_json__not_staff_or_no_view_permission__403_json(client: Client, user_with) -> None:
    workflow_id, _ = _graph("private")
    url = f"{WORKFLOWS}{workflow_id}/graph.json"
    assert client.get(url).status_code == 403
    assert user_with("view_task").get(url).status_code == 403
    assert user_with("view_workflow", staff=False).get(url).status_code == 403
    assert user_with("view_workflow").get(url).status_code == 200


def test_page__states_in_words_and_durations_explained(admin_client: Client) -> None:
    workflow_id, _ = _graph("worded")
    queue.claim(["worded-a"], 60_000)

    html = admin_client.get(f"{WORKFLOWS}{workflow_id}/change/").content.decode()
    listed = admin_client.get(WORKFLOWS).content.decode()

    assert "1 blocked, 1 handed out" in html and "1 blocked, 1 handed out" in listed
    assert "handed_out" not in re.sub(r"<script.*?</script>", "", html, flags=re.S)
    assert "from its claim to its end" in html
    assert f'data-url="{WORKFLOWS}{workflow_id}/graph.json"' in html


def test_page__cancel_button__cancels_the_steps_left_and_logs_it(admin_client: Client) -> None:
    from django.contrib.admin.models import CHANGE, LogEntry

    workflow_id, _tasks = _graph("stopped")
    page = f"{WORKFLOWS}{workflow_id}/change/"
    html = admin_client.get(page).content.decode()
    assert 'id="cancel-workflow-form"' in html and "window.confirm(" in html

    r = admin_client.post(f"{WORKFLOWS}{workflow_id}/cancel/")

    assert (r.status_code, r["Location"]) == (302, page)
    assert _graph_json(admin_client, workflow_id)["state"] == "cancelled"
    followed = admin_client.get(page).content.decode()
    assert "cancelled: 2 steps." in followed
    assert 'id="cancel-workflow-form"' not in followed  # nothing left to cancel
    (entry,) = LogEntry.objects.filter(object_id=str(workflow_id))
    assert (entry.action_flag, entry.get_change_message()) == (CHANGE, "Cancelled 2 steps.")


def test_page__cancel_with_nothing_left__says_so_no_log(admin_client: Client) -> None:
    from django.contrib.admin.models import LogEntry

    workflow_id, _ = _graph("over")
    assert queue.cancel_steps(workflow_id) == 2

    r = admin_client.post(f"{WORKFLOWS}{workflow_id}/cancel/", follow=True)

    assert "1 workflow had no step left to cancel." in r.content.decode()
    assert not LogEntry.objects.exists()


def test_cancel__get_or_without_change_permission__refused(user_with) -> None:
    workflow_id, _ = _graph("guarded")
    url = f"{WORKFLOWS}{workflow_id}/cancel/"
    viewer = user_with("view_workflow")

    assert viewer.get(url).status_code == 405
    assert viewer.post(url).status_code == 403
    assert (
        'id="cancel-workflow-form"'
        not in viewer.get(f"{WORKFLOWS}{workflow_id}/change/").content.decode()
    )
    assert _graph_json(viewer, workflow_id)["state"] == "running"


def test_list_action__cancel_selected__each_through_cancel_steps_and_logged(
    admin_client: Client,
) -> None:
    from django.contrib.admin.models import LogEntry

    first, _ = _graph("first")
    second, _ = _graph("second")
    done, _done_tasks = _graph("done-already")
    queue.cancel_steps(done)

    r = admin_client.post(
        WORKFLOWS,
        {"action": "cancel_selected", "_selected_action": [first, second, done]},
        follow=True,
    )

    html = r.content.decode()
    assert f'Workflow <a href="{WORKFLOWS}{first}/change/">#{first}</a> cancelled: 2 steps.' in html
    assert "1 workflow had no step left to cancel." in html
    assert {_graph_json(admin_client, w)["state"] for w in (first, second)} == {"cancelled"}
    logged = sorted(int(e.object_id) for e in LogEntry.objects.all())
    assert logged == [first, second]
    assert "Cancel the selected workflows?" in admin_client.get(WORKFLOWS).content.decode()


def test_dlq_list__workflow_column_linked(admin_client: Client) -> None:
    workflow_id, _tasks = _graph("buried", first_fails=True)
    (a,) = queue.claim(["buried-a"], 60_000)
    queue.nack(a.task.pk, lease_id=a.lease_id, error="x")

    html = admin_client.get("/admin/broker/deadtask/").content.decode()

    assert '<th scope="col" class="column-workflow_column">' in html
    assert f'<a href="{WORKFLOWS}{workflow_id}/change/">#{workflow_id}</a> a' in html

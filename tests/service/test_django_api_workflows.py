"""broker.enqueue(after=...) and broker.submit_workflow(): the Django API's dependencies, part of
the caller's transaction like any enqueue."""

from __future__ import annotations

import pytest
from django.db import transaction

import broker
from broker import queue
from broker.models import Task, Workflow

pytestmark = pytest.mark.django_db(transaction=True)


def test_enqueue__after__blocked_until_the_parent_is_done() -> None:
    parent = broker.enqueue({"n": 1}, queue="dj-parent")
    child = broker.enqueue({"n": 2}, queue="dj-child", after=[parent], after_policy="finished")
    assert Task.objects.get(pk=child).state == "blocked"
    (d,) = queue.claim(["dj-parent"], 1000)
    queue.nack(d.task.pk, lease_id=d.lease_id, error="x")  # attempts left: not finished yet
    assert Task.objects.get(pk=child).state == "blocked"
    with pytest.raises(broker.InvalidTaskError) as bad:
        broker.enqueue({"n": 3}, after=["999999"])
    assert bad.value.fields == {"after.0": ["No such task."]}


def test_submit_workflow__in_a_transaction_rolled_back__leaves_nothing() -> None:
    steps = [
        {"ref": "a", "job": {"payload": 1}},
        {"ref": "b", "job": {"payload": 2}, "after": ["a"]},
    ]
    with pytest.raises(RuntimeError), transaction.atomic():
        broker.submit_workflow("rolled-back", steps)
        raise RuntimeError
    assert not Workflow.objects.exists() and not Task.objects.exists()
    with transaction.atomic():
        workflow_id, tasks = broker.submit_workflow("kept", steps)
    assert [Task.objects.get(pk=tasks[r]).state for r in "ab"] == ["ready", "blocked"]
    assert Workflow.objects.get(pk=workflow_id).name == "kept"
    queue.fold_deltas()
    assert queue.totals()["enqueued"] == 2


def test_submit_workflow__a_cycle__invalid_naming_the_step() -> None:
    steps = [
        {"ref": "a", "job": {"payload": 1}, "after": ["b"]},
        {"ref": "b", "job": {"payload": 2}, "after": ["a"]},
    ]
    with pytest.raises(broker.InvalidTaskError) as bad:
        broker.submit_workflow("loop", steps)
    assert list(bad.value.fields) == ["steps.0.after.0"]

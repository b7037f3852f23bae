"""Retention and graphs: a done or cancelled task is kept while a task not yet done or cancelled
names it in `after` (a dead one included: it may be requeued), and so is every step of a
workflow with a step not yet done or cancelled; kept tasks never hold the prune back from the
ones behind them."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from broker import queue, sweeper
from broker.models import Task, Workflow
from broker.queue import NewTask
from broker.sweeper import prune, sweep_once
from broker.workflows import reading

pytestmark = pytest.mark.django_db

OLD = timedelta(days=8)


def _run(pk: int, how: str = "ack", result: object = None) -> None:
    """Claim `pk` (the only ready task of its queue) and ack it, or nack it."""
    queue_name = Task.objects.get(pk=pk).queue
    (d,) = queue.claim([queue_name], 60_000)
    assert d.task.pk == pk
    if how == "ack":
        queue.ack(pk, lease_id=d.lease_id, result=result)
    else:
        queue.nack(pk, lease_id=d.lease_id, error="boom")


def _age(*pks: int) -> None:
    Task.objects.filter(pk__in=pks).update(updated_at=timezone.now() - OLD)  # test-only


def _kept() -> set[int]:
    return set(Task.objects.values_list("pk", flat=True))


def _sweep() -> int:
    with override_settings(BROKER_RETENTION=timedelta(days=7)):
        return sweep_once().pruned


def test_prune__done_parent_of_a_child_blocked_on_a_dead_sibling__kept_and_delivered_later() -> (
    None
):
    a = queue.enqueue(NewTask(payload="1", queue="a"))[0]
    b = queue.enqueue(NewTask(payload="2", queue="b", max_attempts=1))[0]
    c = queue.enqueue(NewTask(payload="3", queue="c", after=(a, b)))[0]
    _run(a, result={"rows": 12})
    _run(b, "nack")  # dead: the DLQ
    _age(a)

    assert _sweep() == 0
    assert _kept() == {a, b, c}

    queue.requeue(b)  # the triage, past the retention
    _run(b)
    (d,) = queue.claim(["c"], 60_000)
    assert d.task.pk == c
    assert [(p.pk, p.state, p.result) for p in d.parents] == [
        (a, "done", json.dumps({"rows": 12})),
        (b, "done", None),
    ]
    queue.ack(c, lease_id=d.lease_id)
    _age(a, b, c)
    assert _sweep() == 3  # nothing live names them any more
    assert _kept() == set()


@pytest.mark.parametrize("end", ["discard", "requeue_and_ack"])
def test_prune__done_parent_of_a_dead_child__kept_until_the_child_is_done_or_cancelled(
    end: str,
) -> None:
    a = queue.enqueue(NewTask(payload="1", queue="a"))[0]
    c = queue.enqueue(NewTask(payload="2", queue="c", after=(a,), max_attempts=1))[0]
    _run(a, result=7)
    _run(c, "nack")  # ran with a's result and died: a requeue runs it again with it
    _age(a)
    assert _sweep() == 0
    assert _kept() == {a, c}
    if end == "discard":
        queue.discard_many([c])
    else:
        queue.requeue(c)
        _run(c)
    _age(a, c)
    assert _sweep() == 2


def test_prune__cancelled_parent_named_under_finished_by_a_blocked_task__kept() -> None:
    a = queue.enqueue(NewTask(payload="1", queue="a"))[0]
    b = queue.enqueue(NewTask(payload="2", queue="b"))[0]
    c = queue.enqueue(NewTask(payload="3", queue="c", after=(a, b), after_policy="finished"))[0]
    queue.cancel(a)
    _age(a)
    assert _sweep() == 0
    assert _kept() == {a, b, c}


def _workflow() -> tuple[int, dict[str, int]]:
    steps = [
        ("a", NewTask(payload="1", queue="a"), (), "done"),
        ("b", NewTask(payload="2", queue="b", max_attempts=1), (), "done"),
        ("c", NewTask(payload="3", queue="c"), ("a", "b"), "done"),
        ("x", NewTask(payload="4", queue="x"), (), "done"),  # waits for nothing, named by none
    ]
    return queue.enqueue_graph("etl", steps)


def test_prune__steps_of_a_workflow_with_a_dead_step__all_kept_until_it_ends() -> None:
    workflow, tasks = _workflow()
    _run(tasks["a"], result="A")
    _run(tasks["x"])
    _run(tasks["b"], "nack")
    _age(*tasks.values())

    assert _sweep() == 0
    body = reading.describe(workflow)
    assert [step["ref"] for step in body["steps"]] == ["a", "b", "c", "x"]
    assert body["state"] == "failed"

    queue.requeue(tasks["b"])
    _run(tasks["b"])
    _run(tasks["c"])
    assert reading.describe(workflow)["state"] == "succeeded"
    _age(*tasks.values())
    Workflow.objects.filter(pk=workflow).update(created_at=timezone.now() - OLD)  # test-only
    assert _sweep() == 4
    assert not Workflow.objects.filter(pk=workflow).exists()  # emptied: removed with them


def test_prune__workflow_cancelled_with_a_dead_step__kept_until_the_step_is_discarded() -> None:
    workflow, tasks = _workflow()
    _run(tasks["a"])
    _run(tasks["b"], "nack")
    assert queue.cancel_steps(workflow) == 2  # c and x; b stays in the DLQ
    _age(*tasks.values())
    assert _sweep() == 0
    queue.discard_many([tasks["b"]])
    _age(*tasks.values())
    assert _sweep() == 4


def test_prune__kept_tasks_first__those_behind_them_still_pruned_within_a_few_sweeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kept task is looked at and passed: the walk goes on behind it, and comes back to it."""
    monkeypatch.setattr(sweeper, "_walked_to", None)  # this process's walk starts afresh
    root = queue.enqueue(NewTask(payload="0", queue="r", max_attempts=1))[0]
    kept = []
    for n in range(6):
        pk = queue.enqueue(NewTask(payload=str(n), queue="k"))[0]
        _run(pk)
        kept.append(pk)
    # Each kept one is named by a task still blocked: it waits for the root too.
    queue.enqueue_many([NewTask(payload="1", queue="w", after=(pk, root)) for pk in kept])
    _age(*kept)
    Task.objects.filter(pk__in=kept).update(updated_at=timezone.now() - OLD - timedelta(days=1))
    gone = []
    for n in range(3):
        pk = queue.enqueue(NewTask(payload=str(n), queue="g"))[0]
        _run(pk)
        gone.append(pk)
    _age(*gone)

    with override_settings(BROKER_RETENTION=timedelta(days=7)):
        pruned = sum(prune(batch=2, max_batches=1) for _ in range(6))
    assert pruned == 3
    assert not set(gone) & _kept()
    assert set(kept) <= _kept()

"""broker.enqueue(key=...) and workflow steps with a key: the Django API's keys, honoured by the
queue's fair, key_max_in_flight and ordered settings like those of POST /jobs."""

from __future__ import annotations

import pytest

import broker
from broker import queue, queues
from broker.models import Task

pytestmark = pytest.mark.django_db


def test_enqueue__key__stored_and_listed_by_it() -> None:
    keyed = broker.enqueue({"n": 1}, queue="imports", key="tenant-acme")
    broker.enqueue({"n": 2}, queue="imports")

    assert Task.objects.get(pk=keyed).key == "tenant-acme"
    assert list(Task.objects.filter(key="tenant-acme").values_list("pk", flat=True)) == [int(keyed)]


def test_enqueue__key_longest_allowed__kept_whole() -> None:
    task_id = broker.enqueue({"n": 1}, key="k" * 128)

    assert Task.objects.get(pk=task_id).key == "k" * 128


def test_enqueue__ordered_queue__a_keys_next_task_waits_for_the_first() -> None:
    queues.update("ledger", {"ordered": True})
    first = broker.enqueue({"entry": 1}, queue="ledger", key="account-7")
    second = broker.enqueue({"entry": 2}, queue="ledger", key="account-7")
    other = broker.enqueue({"entry": 1}, queue="ledger", key="account-9")

    claimed = queue.claim(["ledger"], 30_000, limit=10)

    assert sorted(d.task.pk for d in claimed) == sorted([int(first), int(other)])
    assert Task.objects.get(pk=second).key_wait is True
    (held,) = [d for d in claimed if d.task.pk == int(first)]
    queue.ack(held.task.pk, lease_id=held.lease_id)
    assert [d.task.pk for d in queue.claim(["ledger"], 30_000, limit=10)] == [int(second)]


def test_enqueue__key_max_in_flight__the_keys_second_task_waits_other_keys_go() -> None:
    queues.update("imports", {"key_max_in_flight": 1})
    a1 = broker.enqueue({"n": 1}, queue="imports", key="a")
    broker.enqueue({"n": 2}, queue="imports", key="a")
    b1 = broker.enqueue({"n": 1}, queue="imports", key="b")

    claimed = queue.claim(["imports"], 30_000, limit=10)

    assert sorted(d.task.pk for d in claimed) == sorted([int(a1), int(b1)])


def test_submit_workflow__step_with_a_key__its_task_carries_it() -> None:
    steps = [
        {"ref": "fetch", "job": {"payload": 1, "key": "tenant-acme"}},
        {"ref": "load", "job": {"payload": 2}, "after": ["fetch"]},
    ]

    _, tasks = broker.submit_workflow("import", steps)

    assert Task.objects.get(pk=tasks["fetch"]).key == "tenant-acme"
    assert Task.objects.get(pk=tasks["load"]).key is None


def test_submit_workflow__bad_key__invalid_naming_the_step() -> None:
    steps = [{"ref": "a", "job": {"payload": 1, "key": ""}}]

    with pytest.raises(broker.InvalidTaskError) as bad:
        broker.submit_workflow("bad", steps)

    assert list(bad.value.fields) == ["steps.0.job.key"]
    assert not Task.objects.exists()

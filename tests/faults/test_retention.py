"""Retention: the sweeper prunes old done and cancelled tasks in small batches; dead ones stay."""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from broker import queue
from broker.models import Task, TaskError
from broker.queue import NewTask, sweeps
from broker.states import FINISHED_STATES, State
from broker.sweeper import prune, sweep_once
from queueproject import settings as project_settings
from tests.conftest import analyze_tasks, assert_invariant
from tests.procs import python

OLD = timedelta(days=8)


def _task_in(state: str, enqueue_task, *, age: timedelta = OLD) -> int:
    """A task brought to `state` through the state machine, then aged (a test-only UPDATE)."""
    pk = enqueue_task(max_attempts=1)
    if state != State.READY:
        if state == State.CANCELLED:
            queue.cancel(pk)
        else:
            [d] = queue.claim(None, 30_000)
            if state == State.DONE:
                queue.ack(pk, lease_id=d.lease_id)
            elif state == State.DEAD:
                queue.nack(pk, lease_id=d.lease_id, error="boom")
    Task.objects.filter(pk=pk).update(updated_at=timezone.now() - age)
    return pk


def _states() -> dict[int, str]:
    return dict(Task.objects.values_list("pk", "state"))


@pytest.mark.django_db
def test_prune_finished__old_done_and_cancelled__deleted_with_errors_counters_kept(
    enqueue_task,
) -> None:
    # An error history on a task that ends done: it must go with the task.
    retried = enqueue_task(max_attempts=2)
    [d] = queue.claim(None, 30_000)
    queue.nack(retried, lease_id=d.lease_id, error="first try failed")
    Task.objects.filter(pk=retried).update(available_at=timezone.now())
    queue.promote_delayed()
    [d] = queue.claim(None, 30_000)
    queue.ack(retried, lease_id=d.lease_id)
    Task.objects.filter(pk=retried).update(updated_at=timezone.now() - OLD)
    done = _task_in(State.DONE, enqueue_task)
    cancelled = _task_in(State.CANCELLED, enqueue_task)
    dead = _task_in(State.DEAD, enqueue_task)
    young = _task_in(State.DONE, enqueue_task, age=timedelta(days=6))
    ready = _task_in(State.READY, enqueue_task)  # last: the helpers claim the oldest ready task
    totals = queue.totals()

    assert queue.prune_finished(timezone.now() - timedelta(days=7), limit=100).deleted == 3

    assert _states() == {dead: State.DEAD, ready: State.READY, young: State.DONE}
    assert not TaskError.objects.filter(task_id__in=[done, cancelled, retried]).exists()
    assert TaskError.objects.filter(task_id=dead).count() == 1
    assert queue.totals() == totals  # pruning is not a state change
    assert_invariant()


@pytest.mark.django_db
def test_prune_finished__limit__deletes_oldest_batch_only(enqueue_task) -> None:
    pks = [_task_in(State.DONE, enqueue_task, age=OLD + timedelta(hours=i)) for i in range(5)]
    cutoff = timezone.now() - timedelta(days=7)
    first = queue.prune_finished(cutoff, limit=2)
    assert first.deleted == 2
    assert sorted(_states()) == sorted(pks[:3])  # the two oldest went first
    second = queue.prune_finished(cutoff, limit=2, after=first.walked_to)
    assert second.deleted == 2
    assert queue.prune_finished(cutoff, limit=2, after=second.walked_to) == (1, None)  # the end
    assert queue.prune_finished(cutoff, limit=2) == (0, None)


@pytest.mark.django_db
def test_sweep__retention_setting__prunes_only_older_tasks(enqueue_task) -> None:
    old = _task_in(State.DONE, enqueue_task, age=timedelta(hours=2))
    recent = _task_in(State.CANCELLED, enqueue_task, age=timedelta(minutes=30))
    with override_settings(BROKER_RETENTION=timedelta(hours=1)):
        assert sweep_once().pruned == 1
    assert _states() == {recent: State.CANCELLED}
    assert old not in _states()


@pytest.mark.django_db
def test_sweep__retention_zero__keeps_everything(enqueue_task) -> None:
    pk = _task_in(State.DONE, enqueue_task, age=timedelta(days=3650))
    with override_settings(BROKER_RETENTION=timedelta(0)):
        assert sweep_once().pruned == 0
    assert _states() == {pk: State.DONE}


@pytest.mark.django_db
def test_prune__backlog__at_most_max_batches_per_sweep(enqueue_task) -> None:
    for _ in range(5):
        _task_in(State.DONE, enqueue_task)
    assert prune(batch=2, max_batches=2) == 4
    assert prune(batch=2, max_batches=2) == 1


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        ("604800", 604800),
        ("90s", 90),
        ("15m", 900),
        ("12h", 43200),
        ("7d", 604800),
        ("0", 0),
        ("", 604800),
    ],
)
def test_retention_setting__formats__parsed(
    monkeypatch: pytest.MonkeyPatch, raw: str, seconds: int
) -> None:
    monkeypatch.setenv("BROKER_RETENTION", raw)
    assert project_settings._duration("BROKER_RETENTION", "7d") == timedelta(seconds=seconds)


@pytest.mark.parametrize("raw", ["7 days", "-5", "1.5h", "d"])
def test_retention_setting__bad_value__improperly_configured(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("BROKER_RETENTION", raw)
    with pytest.raises(ImproperlyConfigured, match="BROKER_RETENTION"):
        project_settings._duration("BROKER_RETENTION", "7d")


@pytest.mark.parametrize(
    ("raw", "least"), [("0", 1), ("-1", 1), ("abc", 1), ("1.5", 0), ("1e3", 1)]
)
def test_whole_number_setting__bad_value__improperly_configured_naming_it(
    monkeypatch: pytest.MonkeyPatch, raw: str, least: int
) -> None:
    monkeypatch.setenv("BROKER_HISTORY_MINUTES", raw)
    with pytest.raises(ImproperlyConfigured, match="BROKER_HISTORY_MINUTES: a whole number"):
        project_settings._whole("BROKER_HISTORY_MINUTES", 2880, least=least)


@pytest.mark.parametrize("raw", ["10.0.0.0/33", "nope", "10.0.0.0/8,300.1.1.1"])
def test_fetch_networks_setting__bad_value__improperly_configured_naming_it(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("BROKER_FETCH_ALLOWED_NETWORKS", raw)
    with pytest.raises(ImproperlyConfigured, match="BROKER_FETCH_ALLOWED_NETWORKS: networks in"):
        project_settings._networks("BROKER_FETCH_ALLOWED_NETWORKS")


def test_fetch_networks_setting__blanks_skipped_hosts_as_networks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BROKER_FETCH_ALLOWED_NETWORKS", " , 10.0.0.5/8,127.0.0.1")
    found = project_settings._networks("BROKER_FETCH_ALLOWED_NETWORKS")
    assert found == ["10.0.0.0/8", "127.0.0.1/32"]


def test_settings__zero_where_it_means_something__the_process_starts() -> None:
    """No retry backoff and no history kept are settings a test rig uses: 0 starts; a tick of 0
    (a sweeper spinning) does not."""
    zero = {"BROKER_RETRY_BASE_MS": "0", "BROKER_RETRY_MAX_MS": "0",
            "BROKER_HISTORY_MINUTES": "0", "BROKER_HISTORY_HOURS": "0"}  # fmt: skip
    env = {**os.environ, **zero, "DJANGO_SETTINGS_MODULE": "queueproject.settings"}
    code = "from django.conf import settings; print(settings.BROKER_RETRY_BASE_MS)"
    assert python(f"import django; django.setup(); {code}", env).stdout.strip() == "0"


def test_whole_number_setting__given_or_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BROKER_SQLITE_POLL_MS", raising=False)
    assert project_settings._whole("BROKER_SQLITE_POLL_MS", 50) == 50
    monkeypatch.setenv("BROKER_SQLITE_POLL_MS", "")
    assert project_settings._whole("BROKER_SQLITE_POLL_MS", 50) == 50
    monkeypatch.setenv("BROKER_SQLITE_POLL_MS", " 0 ")
    assert project_settings._whole("BROKER_SQLITE_POLL_MS", 50, least=0) == 0


@pytest.mark.parametrize("raw", ["0", "-1", "x"])
def test_runsweeper__interval_of_no_milliseconds__usage_error(raw: str) -> None:
    with pytest.raises(CommandError, match="--interval-ms"):
        call_command("runsweeper", "--interval-ms", raw)


def test_retention_setting__unset__seven_days() -> None:
    env = {k: v for k, v in os.environ.items() if k != "BROKER_RETENTION"}
    code = "from django.conf import settings; print(settings.BROKER_RETENTION.total_seconds())"
    settings_env = {**env, "DJANGO_SETTINGS_MODULE": "queueproject.settings"}
    out = python(f"import django; django.setup(); {code}", settings_env).stdout
    assert out.strip() == "604800.0"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_prune_finished__row_locked_elsewhere__skipped_without_waiting(enqueue_task) -> None:
    locked = _task_in(State.DONE, enqueue_task)
    free = _task_in(State.DONE, enqueue_task)
    holding, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        try:
            with transaction.atomic():
                list(Task.objects.select_for_update().filter(pk=locked))
                holding.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_lock)
    holder.start()
    try:
        assert holding.wait(10)
        started = time.monotonic()
        assert queue.prune_finished(timezone.now() - timedelta(days=7)).deleted == 1
        assert time.monotonic() - started < 1.0
        assert _states() == {locked: State.DONE}
    finally:
        release.set()
        holder.join(10)
    assert queue.prune_finished(timezone.now() - timedelta(days=7)).deleted == 1
    assert free not in _states() and not _states()


@pytest.mark.postgres
@pytest.mark.django_db
def test_prune_query__served_by_finished_index() -> None:
    cutoff = timezone.now() - timedelta(days=7)
    walked = (cutoff - timedelta(days=1), 10)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        plan = (
            Task.objects.filter(state__in=FINISHED_STATES, updated_at__lt=cutoff)
            .filter(updated_at__gte=walked[0])
            .exclude(updated_at=walked[0], pk__lte=walked[1])
            .order_by("updated_at", "pk")
            .values_list("pk", flat=True)[:500]
            .explain()
        )
    assert "task_finished_idx" in plan, plan


@pytest.mark.postgres
@pytest.mark.django_db
def test_prune_query__what_keeps_a_task__an_index_probe_each() -> None:
    """Whether a live task names a task and whether its workflow has a live step are index
    probes (the planner may hash every live task instead, when that is cheaper than a batch's
    probes: never with many live tasks)."""
    for _ in range(5):
        queue.enqueue_many([NewTask(payload="0") for _ in range(1000)])
    analyze_tasks()
    plan = sweeps.unkept([1, 2, 3]).explain()
    assert "Index Cond: (parent_id = broker_task.id)" in plan, plan  # a parent's dependency rows
    assert "task_workflow_idx" in plan, plan

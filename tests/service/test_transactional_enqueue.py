"""broker.enqueue() in transaction.atomic(): the task exists, and wakes claims, only on commit."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

import broker
from broker import longpoll, queue
from broker.models import Task
from broker.wakeup import CHANNEL, PING_PREFIX

pytestmark = pytest.mark.django_db(transaction=True)


class RollbackError(Exception):
    """Raised inside atomic() to roll it back."""


def _enqueued() -> int:
    return queue.totals()["enqueued"]


# -- rows and counters ------------------------------------------------------------------------


def test_enqueue__outside_transaction__ready_task_with_the_payload() -> None:
    task_id = broker.enqueue({"to": "ann", "n": [1, 2]}, queue="mail", priority="high")

    row = Task.objects.get(pk=int(task_id))
    assert isinstance(task_id, str)
    assert (row.state, row.queue, row.priority, row.max_attempts) == ("ready", "mail", 0, 3)
    assert json.loads(row.payload) == {"to": "ann", "n": [1, 2]}
    assert _enqueued() == 1


def test_enqueue__atomic_committed__task_exists_and_is_counted() -> None:
    with transaction.atomic():
        task_id = broker.enqueue({"order": 7})
        Task.objects.filter(pk=int(task_id)).get()  # visible to its own transaction

    assert Task.objects.filter(pk=int(task_id), state="ready").exists()
    assert _enqueued() == 1


def test_enqueue__atomic_rolled_back__no_task_and_no_count() -> None:
    with pytest.raises(RollbackError), transaction.atomic():
        task_id = broker.enqueue({"order": 7})
        raise RollbackError

    assert not Task.objects.filter(pk=int(task_id)).exists()
    assert Task.objects.count() == 0
    assert _enqueued() == 0


def test_enqueue__inner_savepoint_rolled_back__only_the_outer_task_survives() -> None:
    with transaction.atomic():
        kept_before = broker.enqueue("before", queue="outer")
        with pytest.raises(RollbackError), transaction.atomic():
            broker.enqueue("inner", queue="inner")
            raise RollbackError
        kept_after = broker.enqueue("after", queue="outer")

    # By payload, not id: SQLite hands the rolled-back id to the next insert.
    assert list(Task.objects.order_by("pk").values_list("pk", "payload", "queue")) == [
        (int(kept_before), '"before"', "outer"),
        (int(kept_after), '"after"', "outer"),
    ]
    assert _enqueued() == 2


def test_enqueue__outer_rolled_back_after_inner_savepoint_released__nothing_survives() -> None:
    with pytest.raises(RollbackError), transaction.atomic():
        with transaction.atomic():
            broker.enqueue("inner, released")
        broker.enqueue("outer")
        raise RollbackError

    assert Task.objects.count() == 0
    assert _enqueued() == 0


def test_enqueue__idempotency_key_repeated_in_one_transaction__one_task() -> None:
    with transaction.atomic():
        first = broker.enqueue({"n": 1}, idempotency_key="order-7")
        again = broker.enqueue({"n": 2}, idempotency_key="order-7")

    assert first == again
    assert Task.objects.count() == 1
    assert _enqueued() == 1


def test_enqueue__run_after__delayed_until_then_not_before() -> None:
    from django.utils import timezone

    when = timezone.now() + timezone.timedelta(hours=1)
    task_id = broker.enqueue("later", run_after=when)

    row = Task.objects.get(pk=int(task_id))
    assert row.state == "delayed"
    assert row.available_at == when  # the time itself, not a delay read off an earlier clock


def test_enqueue__run_after_already_past__ready_now() -> None:
    from django.utils import timezone

    task_id = broker.enqueue("now", run_after=timezone.now() - timezone.timedelta(seconds=1))
    assert Task.objects.get(pk=int(task_id)).state == "ready"


# -- wake-ups ---------------------------------------------------------------------------------


def _claim_in_thread(queue_name: str, wait_ms: int) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["got"] = longpoll.claim_wait([queue_name], lease_ms=30_000, wait_ms=wait_ms)
            out["at"] = time.monotonic()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.3)  # parked
    return thread, out


def test_enqueue__parked_claim__handed_the_task_only_after_commit() -> None:
    thread, out = _claim_in_thread("tx-wake", wait_ms=5000)
    with transaction.atomic():
        task_id = broker.enqueue("wake me", queue="tx-wake")
        time.sleep(0.5)
        assert thread.is_alive(), "claimed a task that was not committed"
    committed = time.monotonic()
    thread.join(10)

    assert [d.task.pk for d in out["got"]] == [int(task_id)]
    # Well inside the 5 s wait: the commit woke it, the wait did not run out.
    assert out["at"] - committed < 2.0


def test_enqueue__parked_claim_and_rollback__claim_gets_nothing() -> None:
    thread, out = _claim_in_thread("tx-rollback", wait_ms=1500)
    with pytest.raises(RollbackError), transaction.atomic():
        broker.enqueue("never", queue="tx-rollback")
        raise RollbackError
    thread.join(10)

    assert out["got"] == []
    assert Task.objects.count() == 0


@pytest.fixture
def listener() -> Iterator[Callable[[float], list[str]]]:
    """A separate LISTEN connection; listener(seconds) → the payloads that arrived by then."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    conn = psycopg.connect(**params, autocommit=True)
    conn.execute(f"LISTEN {CHANNEL}")

    def received(seconds: float) -> list[str]:
        # The hub's self-checks ("!ping:...") share the channel; they announce no task.
        notes = conn.notifies(timeout=seconds, stop_after=None)
        return [n.payload for n in notes if not n.payload.startswith(PING_PREFIX)]

    try:
        yield received
    finally:
        conn.close()


@pytest.mark.postgres
def test_enqueue__savepoint_rolled_back__only_committed_tasks_notify(
    listener: Callable[[float], list[str]],
) -> None:
    with transaction.atomic():
        with pytest.raises(RollbackError), transaction.atomic():
            broker.enqueue("dropped", queue="sp-dropped")
            raise RollbackError
        broker.enqueue("kept", queue="sp-kept")
        assert listener(0.3) == [], "notified before commit"

    assert listener(1.0) == ["sp-kept:1"]


@pytest.mark.postgres
def test_enqueue__rolled_back__no_notification(listener: Callable[[float], list[str]]) -> None:
    with pytest.raises(RollbackError), transaction.atomic():
        broker.enqueue("dropped", queue="rb")
        raise RollbackError

    assert listener(1.0) == []


@pytest.mark.postgres
def test_enqueue__uncommitted__invisible_to_other_claimers() -> None:
    seen: list[Any] = []

    def claim_elsewhere() -> None:
        try:
            seen.append(queue.claim(["tx-hidden"], 30_000))
        finally:
            connection.close()

    with transaction.atomic():
        task_id = broker.enqueue("hidden", queue="tx-hidden")
        other = threading.Thread(target=claim_elsewhere)
        other.start()
        other.join(10)
    after = queue.claim(["tx-hidden"], 30_000)

    assert seen == [[]]
    assert [d.task.pk for d in after] == [int(task_id)]


def test_enqueue__unique__holder_id_in_the_transaction_and_rolled_back_with_it() -> None:
    with transaction.atomic():
        first = broker.enqueue({"doc": 1}, unique={"key": "doc-1", "debounce_ms": 1000})
        again = broker.enqueue({"doc": 2}, unique={"key": "doc-1", "on_conflict": "replace"})
        assert again == first
    assert json.loads(Task.objects.get(pk=int(first)).payload) == {"doc": 2}
    assert (queue.totals()["enqueued"], queue.totals()["deduplicated"]) == (1, 1)
    with pytest.raises(RollbackError), transaction.atomic():
        assert broker.enqueue({"doc": 3}, unique={"key": "doc-1"}) == first
        raise RollbackError
    assert queue.totals()["deduplicated"] == 1


def test_enqueue__unique_bad__invalid_task_error_naming_it() -> None:
    with pytest.raises(broker.InvalidTaskError) as caught:
        broker.enqueue({"doc": 1}, unique={"key": "k", "until": "period"})
    assert list(caught.value.fields) == ["unique.period_s"]

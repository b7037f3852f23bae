"""Claims of many, at once, on tasks whose answers pass 8 MiB: each task handed out exactly once,
none left handed out unanswered, the counters exact (PostgreSQL, one thread per claimer)."""

from __future__ import annotations

import threading

import pytest

from broker import queue
from broker.models import Task
from broker.queue import NewTask
from tests.concurrency.conftest import in_thread
from tests.conftest import assert_invariant

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TASKS, CLAIMERS = 60, 4


@pytest.mark.parametrize("fair", [False, True], ids=["plain", "fair"])
def test_claims_of_20_at_once__tasks_of_1_mb__each_delivered_once_none_left_held(
    fair: bool,
) -> None:
    if fair:
        from broker.models import Queue

        Queue.objects.create(name="big", fair=True)
    made = [
        queue.enqueue(NewTask(payload='"' + "p" * 1_000_000 + '"', queue="big", key=f"k{i % 3}"))[0]
        for i in range(TASKS)
    ]
    delivered: list[int] = []
    answers: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def claimer() -> None:
        while True:
            got = queue.claim(["big"], 60_000, limit=20)
            if not got:
                return
            with lock:
                delivered.extend(d.task.pk for d in got)
                answers.append(len(got))

    threads = [in_thread(claimer, errors) for _ in range(CLAIMERS)]
    for thread in threads:
        thread.join(60)

    assert not errors, errors
    assert sorted(delivered) == sorted(made)  # each once
    assert max(answers) == 9  # 9 MB: the ninth takes an answer past 8 MiB
    handed_out = Task.objects.filter(queue="big", state="handed_out", attempts=1).count()
    assert handed_out == TASKS
    stats = queue.stats()
    assert (stats["gauges"]["handed_out"], stats["totals"]["delivered"]) == (TASKS, TASKS)
    assert_invariant()

"""Queue settings and schedules across real processes: two brokers, two sweepers."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.procs import (
    enqueue_batch,
    gunicorn,
    http,
    manage,
    sweeping,
    two_brokers,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _enqueue(base: str, queue_name: str, n: int) -> list[str]:
    return enqueue_batch(base, [{"payload": {"i": i}, "queue": queue_name} for i in range(n)])


def test_pause_on_one_broker__obeyed_by_the_other_at_once__resume_wakes_its_parked_claim(
    db_url: str, tmp_path: Path
) -> None:
    with two_brokers(db_url, tmp_path) as (a, b):
        _enqueue(a, "mail", 20)
        for _ in range(5):  # pause on a; the very next claim on b takes nothing
            assert http("PATCH", f"{a}/queues/mail", {"paused": True})[0] == 200
            assert http("GET", f"{b}/jobs/next?queue=mail&wait_ms=0")[0] == 204
            assert http("GET", f"{b}/jobs/next?wait_ms=0")[0] == 204
            assert http("PATCH", f"{a}/queues/mail", {"paused": False})[0] == 200
            status, body = http("GET", f"{b}/jobs/next?queue=mail&wait_ms=0")
            assert status == 200 and body["task"]["queue"] == "mail"
        assert http("PATCH", f"{a}/queues/mail", {"paused": True})[0] == 200
        answer: dict[str, Any] = {}

        def park() -> None:
            answer["got"] = http("GET", f"{b}/jobs/next?queue=mail&wait_ms=20000", timeout=30)
            answer["at"] = time.monotonic()

        parked = threading.Thread(target=park)
        parked.start()
        time.sleep(1.0)
        assert "got" not in answer  # parked on b, the queue paused
        resumed = time.monotonic()
        assert http("PATCH", f"{a}/queues/mail", {"paused": False})[0] == 200
        parked.join(25)
        assert answer["got"][0] == 200
        assert answer["at"] - resumed < 3.0, answer["at"] - resumed  # woken; its wait is 20 s
        assert http("GET", f"{b}/queues/mail")[1]["handed_out"] == 6


def test_claim_requests__seen_by_another_broker__waiting_says_queued_not_no_workers(
    db_url: str, tmp_path: Path
) -> None:
    with two_brokers(db_url, tmp_path) as (a, b):
        (pk,) = _enqueue(a, "lonely", 1)
        assert http("GET", f"{a}/jobs/{pk}")[1]["waiting"]["reason"] == "no_workers"
        assert http("GET", f"{b}/jobs/next?queue=elsewhere&wait_ms=0")[0] == 204
        assert http("GET", f"{b}/jobs/next?queue=lonely,elsewhere&wait_ms=0&lease_ms=1")[0] == 200
        _enqueue(a, "lonely", 1)
        # b writes its notes within a second; a answers from the database.
        (pk2,) = _enqueue(a, "lonely", 1)
        waiting = wait_until(
            lambda: (w := http("GET", f"{a}/jobs/{pk2}")[1]["waiting"])["reason"] == "queued"
            and w,
            5, 0.1, "the claim to be seen",
        )  # fmt: skip
        assert waiting["ahead"] == 1


def test_schedule__two_sweepers__one_task_per_due_time(db_url: str, tmp_path: Path) -> None:
    with gunicorn(db_url, tmp_path, "broker", WORKERS="1") as base:
        # Both sweeping before the schedule exists: a loaded machine takes seconds to boot them,
        # and a first due time passed meanwhile fired late as a catch-up, its task created in
        # the next due time's slot (a slot holding two tasks, with no time enqueued twice).
        with (
            sweeping(db_url, tmp_path, 20, "sweeper0") as first,
            sweeping(db_url, tmp_path, 20, "sweeper1") as second,
        ):
            sweepers = [first, second]
            status, body = http(
                "POST", f"{base}/schedules",
                {"name": "tick", "every_s": 1,
                 "job": {"payload": {"tick": True}, "queue": "ticks"}},
            )  # fmt: skip
            assert status == 201, body
            first_due = datetime.fromisoformat(body["next_run_at"].replace("Z", "+00:00"))
            time.sleep(5.5)
        _, listed = http("GET", f"{base}/jobs?queue=ticks&limit=100")
        created = [
            datetime.fromisoformat(t["created_at"].replace("Z", "+00:00"))
            for t in listed["results"]
        ]
        # Each firing falls in its own one-second slot from the first due time: two tasks in one
        # slot would be one due time enqueued twice.
        slots = [int((at - first_due).total_seconds()) for at in created]
        assert len(created) >= 4, created
        assert len(set(slots)) == len(slots), sorted(slots)
        _, schedule = http("GET", f"{base}/schedules/tick")
        assert schedule["last_task_id"] == max((t["id"] for t in listed["results"]), key=int)
        for proc in sweepers:
            assert "Traceback" not in proc.log_path.read_text()


def test_runsweeper_once__three_at_the_same_due_time__one_task(db_url: str, tmp_path: Path) -> None:
    from broker import schedules
    from broker.models import Schedule, Task

    schedules.create({"name": "due", "every_s": 3600, "job": {"payload": 1, "queue": "once"}})
    # Long missed: the first sweeper to get the row fires it once, for all the missed times.
    Schedule.objects.filter(name="due").update(next_run_at=datetime(2020, 1, 1, tzinfo=UTC))
    procs = [manage(["runsweeper", "--once"], db_url, tmp_path, f"once{i}") for i in range(3)]
    outputs = []
    for proc in procs:
        assert proc.wait(60) == 0, proc.output()
        outputs.append(proc.output().strip().rsplit(", ", 1)[-1])
        proc.stop()
    assert Task.objects.filter(queue="once").count() == 1
    assert sorted(outputs) == ["fired 0", "fired 0", "fired 1"]

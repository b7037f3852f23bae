"""The sweeper fires due schedules: one task per due time, one for a missed stretch."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command

from broker import schedules
from broker.models import Schedule, Task
from broker.sweeper import sweep_once

pytestmark = pytest.mark.django_db

JOB = {"payload": {"n": 1}, "queue": "cron", "priority": "high", "max_attempts": 5}
T0 = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, at: datetime) -> None:
        self.at = at
        monkeypatch.setattr(schedules, "current_time", lambda: self.at)

    def advance(self, **delta: float) -> None:
        self.at += timedelta(**delta)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock(monkeypatch, T0)


def make(**body) -> Schedule:
    body.setdefault("job", JOB)
    return schedules.create(body)


def test_next_due__every_s__on_the_grid_from_its_anchor() -> None:
    s = Schedule(every_s=30, anchored_at=T0)
    assert schedules.next_due(s, T0) == T0 + timedelta(seconds=30)
    assert schedules.next_due(s, T0 + timedelta(seconds=29.9)) == T0 + timedelta(seconds=30)
    assert schedules.next_due(s, T0 + timedelta(seconds=30)) == T0 + timedelta(seconds=60)
    assert schedules.next_due(s, T0 + timedelta(seconds=301)) == T0 + timedelta(seconds=330)


def test_next_due__cron_in_a_zone__daylight_saving_gap_and_repeat() -> None:
    paris = ZoneInfo("Europe/Paris")
    s = Schedule(cron="30 2 * * *", timezone="Europe/Paris")
    # 2026-03-29 02:30 does not exist in Paris (clocks go 02:00 → 03:00): cron runs it at 03:00.
    spring = schedules.next_due(s, datetime(2026, 3, 29, 1, 0, tzinfo=paris))
    assert spring.astimezone(paris) == datetime(2026, 3, 29, 3, 0, tzinfo=paris)
    assert spring.tzinfo == UTC
    # 2026-10-25 02:30 happens twice: once only.
    s.cron = "30 2 * * *"
    autumn = schedules.next_due(s, datetime(2026, 10, 25, 0, 0, tzinfo=paris))
    after = schedules.next_due(s, autumn)
    assert after - autumn > timedelta(hours=23)


def test_fire__not_due__nothing(clock: Clock) -> None:
    make(name="n", every_s=60)
    clock.advance(seconds=59)
    assert schedules.fire_due() == 0
    assert not Task.objects.exists()


def test_fire__due__one_task_with_the_job_and_the_next_due_time(clock: Clock) -> None:
    make(name="n", every_s=60)
    clock.advance(seconds=60, milliseconds=5)
    assert schedules.fire_due() == 1
    task = Task.objects.get()
    assert (task.queue, task.priority, task.max_attempts, json.loads(task.payload)) == (
        "cron", 0, 5, {"n": 1},
    )  # fmt: skip
    s = Schedule.objects.get(name="n")
    assert (s.last_task_id, s.last_run_at) == (task.pk, clock.at)
    assert s.next_run_at == T0 + timedelta(seconds=120)
    assert schedules.fire_due() == 0


def test_fire__missed_stretch__fires_once_then_the_next_due_time(clock: Clock) -> None:
    make(name="n", every_s=10)
    clock.advance(seconds=95)  # due times 10, 20, ..., 90 all missed
    assert schedules.fire_due() == 1
    assert schedules.fire_due() == 0
    assert Task.objects.count() == 1
    assert Schedule.objects.get(name="n").next_run_at == T0 + timedelta(seconds=100)


def test_fire__paused__nothing__resumed__first_due_time_after_the_resume(clock: Clock) -> None:
    make(name="n", every_s=10)
    schedules.update("n", {"paused": True})
    clock.advance(seconds=55)
    assert schedules.fire_due() == 0
    s = schedules.update("n", {"paused": False})
    assert s.next_run_at == T0 + timedelta(seconds=60)  # not 10..50: the paused stretch
    assert schedules.fire_due() == 0
    clock.advance(seconds=5)
    assert schedules.fire_due() == 1
    assert Task.objects.count() == 1


def test_fire__cron__at_its_minute(clock: Clock) -> None:
    make(name="c", cron="15 12 * * *", timezone="UTC")
    assert Schedule.objects.get(name="c").next_run_at == T0 + timedelta(minutes=15)
    clock.advance(minutes=15)
    assert schedules.fire_due() == 1
    assert Schedule.objects.get(name="c").next_run_at == T0 + timedelta(days=1, minutes=15)


def test_fire__job_no_longer_valid__skips_that_due_time_says_why(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    make(name="n", every_s=10)
    Schedule.objects.filter(name="n").update(job=json.dumps({"payload": {}, "type": "gone_type"}))
    clock.advance(seconds=10)
    assert schedules.fire_due() == 1
    assert not Task.objects.exists()
    s = Schedule.objects.get(name="n")
    assert s.last_task_id is None and s.next_run_at == T0 + timedelta(seconds=20)
    assert "no longer valid" in caplog.text


def test_fire__a_task_it_waits_for_cancelled_since__skips_that_due_time_others_fire(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    from broker import queue

    parent, _ = queue.enqueue(queue.NewTask(payload="{}", queue="up"))
    make(name="a", every_s=10, job={**JOB, "after": [str(parent)]})
    make(name="b", every_s=10)
    queue.cancel(parent)
    clock.advance(seconds=10)
    assert schedules.fire_due() == 2  # the sweeper goes on (it raised, and died, before)
    assert list(Task.objects.exclude(pk=parent).values_list("queue", flat=True)) == ["cron"]
    assert Schedule.objects.get(name="a").last_task_id is None
    assert Schedule.objects.get(name="a").next_run_at == T0 + timedelta(seconds=20)
    assert "schedule a: its job is no longer valid" in caplog.text
    assert queue.stats()["totals"]["enqueued"] == 2  # the parent and b's task: none half-made


def test_sweep__fires_and_folds_the_counts(clock: Clock) -> None:
    from broker import queue

    make(name="n", every_s=10)
    clock.advance(seconds=10)
    result = sweep_once()
    assert result.fired == 1
    assert queue.stats()["queues"]["cron"]["ready"] == 1


def test_runsweeper_once__says_how_many_fired(clock: Clock) -> None:
    make(name="n", every_s=10)
    clock.advance(seconds=10)
    out = StringIO()
    call_command("runsweeper", "--once", stdout=out)
    assert out.getvalue().strip().endswith("fired 1")


def test_schedules_command__lists_them(clock: Clock) -> None:
    make(name="nightly", cron="0 3 * * *", timezone="Europe/Paris")
    make(name="tick", every_s=30)
    schedules.update("tick", {"paused": True})
    out = StringIO()
    call_command("schedules", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == [
        "name", "timing", "paused", "next_run_at", "last_run_at", "last_task_id", "queue",
    ]  # fmt: skip
    assert lines[1].split()[:8] == [
        "nightly", "0", "3", "*", "*", "*", "(Europe/Paris)", "no",
    ]  # fmt: skip
    assert lines[2].split() == ["tick", "every", "30", "s", "yes", "-", "-", "-", "cron"]
    out = StringIO()
    call_command("schedules", "--json", stdout=out)
    assert [json.loads(line)["name"] for line in out.getvalue().splitlines()] == [
        "nightly", "tick",
    ]  # fmt: skip


def test_schedules_command__none(clock: Clock) -> None:
    out = StringIO()
    call_command("schedules", stdout=out)
    assert out.getvalue().strip() == "no schedules"


def test_fire__unique_job__a_due_time_while_the_last_task_waits_makes_none(clock: Clock) -> None:
    make(name="u", every_s=60, job={"payload": 1, "unique": {"key": "report"}})
    make(name="v", every_s=60, job={"payload": 2, "unique": {"key": "report"}})  # a twin
    clock.advance(seconds=60)
    assert schedules.fire_due() == 2
    (task,) = Task.objects.all()
    clock.advance(seconds=60)
    assert schedules.fire_due() == 2
    assert list(Task.objects.values_list("pk", flat=True)) == [task.pk]
    assert set(Schedule.objects.values_list("last_task_id", flat=True)) == {task.pk}
    assert Task.objects.get().unique_key == "report"

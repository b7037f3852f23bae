"""workers.job and the heartbeat's reports: a handler reports progress and checkpoints with its
job, the reports ride on the lease's beats, and the last one reaches the broker before the ack
or nack."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from contract.limits import MAX_CHECKPOINT_BYTES, MAX_PROGRESS_MESSAGE
from tests.worker_fakes import FakeBroker, delivery, register, wait_until
from workers.heartbeat import Heartbeat
from workers.job import Job, current_job
from workers.runner import Runner

MakeRunner = Callable[..., Runner]


@dataclass
class Resumable:
    """A job type `with_job`: runs `steps(job)`, then returns what the job saw."""

    steps: Callable[[Job], Any]
    with_job: bool = True
    seen: list[Any] = field(default_factory=list)

    def handler(self, payload: Any, job: Job | None = None) -> Any:
        assert job is not None
        self.seen.append(job.checkpoint)
        return self.steps(job)


def _delivered(checkpoint: Any = None) -> dict[str, Any]:
    d = delivery("t1", {"n": 1}, type_="resumable")
    if checkpoint is not None:
        d["task"]["checkpoint"] = checkpoint
    return d


# -- the job ---------------------------------------------------------------------------------


def test_job__reads_as_the_delivered_task() -> None:
    job = Job(_delivered({"row": 7}))
    assert (job["payload"], job.payload, job.id, job.attempts) == ({"n": 1}, {"n": 1}, "t1", 1)
    assert job["type"] == "resumable" and dict(job)["queue"] == "default"
    assert job.checkpoint == {"row": 7}
    assert Job(_delivered()).checkpoint is None


def test_job__save_checkpoint__copied_kept_as_the_checkpoint() -> None:
    job = Job(_delivered({"row": 7}))
    state = {"row": 8}
    job.save_checkpoint(state)
    state["row"] = 9
    assert job.checkpoint == {"row": 8}
    assert job.last_report == {"checkpoint": {"row": 8}}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({1, 2}, "must be JSON"),
        (float("nan"), "must be JSON"),
        ("x" * MAX_CHECKPOINT_BYTES, f"at most {MAX_CHECKPOINT_BYTES} bytes"),
    ],
)
def test_job__save_checkpoint__not_json_or_too_big__value_error(value: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Job(_delivered()).save_checkpoint(value)


def test_job__progress__message_cut_fraction_checked() -> None:
    job = Job(_delivered())
    job.progress(0.5, "m" * (MAX_PROGRESS_MESSAGE + 10))
    assert job.last_report == {"fraction": 0.5, "message": "m" * MAX_PROGRESS_MESSAGE}
    job.progress(1)
    assert job.last_report == {"fraction": 1, "message": None}  # each call replaces the last
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="from 0 to 1"):
            job.progress(bad)
    with pytest.raises(TypeError):
        job.progress(True)


# -- the heartbeat carries the reports -------------------------------------------------------


def test_heartbeat__report__rides_on_the_next_beat_moved_up(fake_broker: FakeBroker) -> None:
    beat = Heartbeat(fake_broker, lease_ms=10_000, report_s=0.05)  # beats every 5 s
    try:
        beat.hold("t1", "l1")
        beat.report("t1", "l1", {"fraction": 0.1})
        beat.report("t1", "l1", {"fraction": 0.2, "message": "two"})
        time.sleep(0.3)
        # One request for both reports, and it extended the lease too.
        assert fake_broker.reports == [("t1", "l1", {"fraction": 0.2, "message": "two"}, 10_000)]
        assert fake_broker.extends == []
        beat.report("t1", "l1", {"checkpoint": 3})
        time.sleep(0.3)
        assert fake_broker.reports[-1] == ("t1", "l1", {"checkpoint": 3}, 10_000)
    finally:
        beat.close()


def test_heartbeat__beat_due_anyway__the_report_costs_no_request(fake_broker: FakeBroker) -> None:
    # Beats every second, so each step below has a quarter to half a second of slack: at 100 ms
    # a beat, a sleep overshot by 20 ms on a busy host counted the beat after the carrying one.
    beat = Heartbeat(fake_broker, lease_ms=2000, report_s=5.0)
    try:
        beat.hold("t1", "l1")
        time.sleep(1.5)  # one plain beat, at 1 s
        extends = len(fake_broker.extends)
        beat.report("t1", "l1", {"fraction": 0.5})
        time.sleep(0.75)  # the beat at 2 s carries it; the next is at 3 s
        assert fake_broker.reports == [("t1", "l1", {"fraction": 0.5}, 2000)]
        assert len(fake_broker.extends) == extends == 1
    finally:
        beat.close()


def test_heartbeat__finish__waiting_report_sent_then_nothing_more(fake_broker: FakeBroker) -> None:
    beat = Heartbeat(fake_broker, lease_ms=10_000, report_s=5.0)
    try:
        beat.hold("t1", "l1")
        beat.report("t1", "l1", {"checkpoint": {"row": 9}})
        beat.finish("t1", "l1")
        assert fake_broker.reports == [("t1", "l1", {"checkpoint": {"row": 9}}, None)]
        beat.report("t1", "l1", {"fraction": 1})  # not held any more: dropped
        beat.finish("t1", "l1")
        assert len(fake_broker.reports) == 1
    finally:
        beat.close()


def test_heartbeat__release__waiting_report_dropped(fake_broker: FakeBroker) -> None:
    beat = Heartbeat(fake_broker, lease_ms=10_000, report_s=0.05)
    try:
        beat.hold("t1", "l1")
        beat.report("t1", "l1", {"fraction": 0.3})
        beat.release("t1", "l1")
        time.sleep(0.15)
        assert fake_broker.reports == []
    finally:
        beat.close()


def test_heartbeat__flush__sent_now_from_the_caller(fake_broker: FakeBroker) -> None:
    beat = Heartbeat(fake_broker, lease_ms=10_000, report_s=5.0)
    try:
        beat.hold("t1", "l1")
        assert beat.flush("t1", "l1") is True  # nothing waiting: no request
        beat.report("t1", "l1", {"checkpoint": 1})
        assert beat.flush("t1", "l1") is True
        assert fake_broker.reports == [("t1", "l1", {"checkpoint": 1}, None)]
        fake_broker.extend_answer = False
        beat.report("t1", "l1", {"checkpoint": 2})
        assert beat.flush("t1", "l1") is False
    finally:
        beat.close()


def test_heartbeat__report_fails__sent_again_under_newer(
    fake_broker: FakeBroker, monkeypatch
) -> None:
    calls: list[dict] = []
    fail_once = threading.Event()

    def flaky(task_id: str, lease_id: str, report: dict, lease_ms: int | None = None) -> bool:
        calls.append(dict(report))
        if not fail_once.is_set():
            fail_once.set()
            raise OSError("down")
        return True

    monkeypatch.setattr(fake_broker, "progress", flaky)
    beat = Heartbeat(fake_broker, lease_ms=200, report_s=0.02)  # beats every 100 ms
    try:
        beat.hold("t1", "l1")
        beat.report("t1", "l1", {"fraction": 0.1, "checkpoint": "a"})
        assert wait_until(lambda: len(calls) == 1)  # the first send failed (waited, not slept)
        beat.report("t1", "l1", {"fraction": 0.2})
        assert wait_until(lambda: len(calls) >= 2)
    finally:
        beat.close()
    assert calls[0] == {"fraction": 0.1, "checkpoint": "a"}
    assert calls[1] == {"fraction": 0.2, "checkpoint": "a"}


# -- in the runner ---------------------------------------------------------------------------


def test_runner__resumable_type__gets_its_job_and_the_delivered_checkpoint(
    fake_broker: FakeBroker, make_runner: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    def steps(job: Job) -> Any:
        assert current_job() is job
        job.progress(0.5, "half")
        job.save_checkpoint({"row": 5})
        return {"from": job.checkpoint}

    kind = register(monkeypatch, "resumable", Resumable(steps))
    fake_broker.deliveries.append(_delivered({"row": 2}))

    assert make_runner(lease_ms=10_000).tick() == "acked"

    assert kind.seen == [{"row": 2}]
    # The waiting report went before the ack (one request: the beat was 5 s away).
    assert fake_broker.events == [
        ("progress", "t1", {"fraction": 0.5, "message": "half", "checkpoint": {"row": 5}}, None),
        ("ack", "t1"),
    ]
    assert fake_broker.acks == [("t1", "lease-t1", {"from": {"row": 5}})]
    assert current_job() is None


def test_runner__handler_fails_after_a_checkpoint__sent_before_the_nack(
    fake_broker: FakeBroker, make_runner: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    def steps(job: Job) -> Any:
        job.save_checkpoint(40)
        raise RuntimeError("worker lost its disk")

    register(monkeypatch, "resumable", Resumable(steps))
    fake_broker.deliveries.append(_delivered())

    assert make_runner(lease_ms=10_000).tick() == "nacked"

    assert fake_broker.events == [("progress", "t1", {"checkpoint": 40}, None), ("nack", "t1")]


def test_runner__long_task_reporting_often__about_one_request_per_report_s(
    fake_broker: FakeBroker, make_runner: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    def steps(job: Job) -> Any:
        for i in range(60):  # 0.6 s, a report every 10 ms
            job.progress(i / 60)
            time.sleep(0.01)
        return "ok"

    register(monkeypatch, "resumable", Resumable(steps))
    fake_broker.deliveries.append(_delivered())

    started = time.monotonic()
    make_runner(lease_ms=10_000, report_s=0.2).tick()
    took = time.monotonic() - started

    # Beats carrying reports (each extends the lease) at least 0.2 s apart, three or four in
    # 0.6 s (more only when a loaded machine stretched the task), and the last one: no request
    # per report, no plain extend.
    assert 3 <= len(fake_broker.reports) <= took / 0.2 + 1 + 1e-6, (took, fake_broker.reports)
    assert fake_broker.extends == []
    assert fake_broker.reports[-1][2] == {"fraction": 59 / 60, "message": None}


def test_runner__untyped_and_plain_typed_handlers__unchanged(
    fake_broker: FakeBroker, make_runner: MakeRunner, log_file
) -> None:
    fake_broker.add("t1", {"line": "x"})
    assert make_runner().tick() == "acked"
    assert '"payload": {"line": "x"}' in log_file.read_text()
    assert fake_broker.reports == []

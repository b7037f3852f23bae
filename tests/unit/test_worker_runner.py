"""Runner against the in-memory FakeBroker: outcomes, heartbeat, stop."""

from __future__ import annotations

import inspect
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.worker_fakes import FakeBroker, Job, register, stop_joined, wait_until
from workers import handlers
from workers.client import MAX_ERROR_CHARS, BrokerError
from workers.runner import Runner

MakeRunner = Callable[..., Runner]


def test_runner__untyped_task__appends_line_and_acks(
    fake_broker: FakeBroker, make_runner: MakeRunner, log_file: Path
) -> None:
    fake_broker.add("t1", {"line": "hello 1"})

    assert make_runner().tick() == "acked"

    assert fake_broker.acks == [("t1", "lease-t1", None)]
    assert log_file.read_text() == '{"id": "t1", "payload": {"line": "hello 1"}}\n'


def test_runner__idle__tick_returns_none(fake_broker: FakeBroker, make_runner: MakeRunner) -> None:
    assert make_runner().tick() is None
    assert fake_broker.claims == 1


def test_runner__fail_payload__nacks_with_error(
    fake_broker: FakeBroker, make_runner: MakeRunner, log_file: Path
) -> None:
    fake_broker.add("t1", {"line": "hello 1", "fail": True})

    assert make_runner().tick() == "nacked"

    assert fake_broker.nacks == [("t1", "lease-t1", "payload asked to fail")]
    assert fake_broker.acks == []
    assert not log_file.exists()


@pytest.mark.parametrize(
    ("job_type", "failure", "reason"),
    [
        pytest.param("boom", RuntimeError("disk on fire"), "RuntimeError: disk on fire",
                     id="raises_with_text"),
        pytest.param("boom", KeyError(), "KeyError", id="raises_without_text_class_name"),
        pytest.param("quits", SystemExit(3), "SystemExit: 3", id="sys_exit_and_keeps_going"),
    ],
)  # fmt: skip
def test_runner__handler_fails__nacks_with_type_message_and_traceback(
    fake_broker: FakeBroker,
    make_runner: MakeRunner,
    monkeypatch: pytest.MonkeyPatch,
    job_type: str,
    failure: BaseException,
    reason: str,
) -> None:
    register(monkeypatch, job_type, Job(result=failure))
    fake_broker.add("t1", {}, type_=job_type)

    assert make_runner().tick() == "nacked"

    ((task_id, lease_id, error),) = fake_broker.nacks
    assert (task_id, lease_id) == ("t1", "lease-t1")
    summary, traceback = error.split("\n", 1)
    assert summary == reason
    # From the handler's frame on: the worker's own frames above it are left out.
    assert traceback.startswith("Traceback (most recent call last):\n  File ")
    lines, first = inspect.getsourcelines(Job.handler)
    at = first + next(n for n, text in enumerate(lines) if "raise self.result" in text)
    assert traceback.endswith(f'worker_fakes.py", line {at}, in handler\n    raise self.result')
    assert "workers/runner.py" not in traceback


def test_runner__handler_keyerror__stored_as_keyerror_with_the_failing_line(
    fake_broker: FakeBroker, make_runner: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    def resize(payload: Any) -> Any:
        return payload["width"]

    monkeypatch.setitem(handlers.REGISTRY, "resize", handlers.Handler("resize", resize))
    fake_broker.add("t1", {"height": 1}, type_="resize")

    make_runner().tick()

    ((_, _, error),) = fake_broker.nacks
    assert error.startswith("KeyError: 'width'\nTraceback (most recent call last):\n")
    assert error.endswith(', in resize\n    return payload["width"]\n           ~~~~~~~^^^^^^^^^')


def test_runner__handler_fails_deep__error_bounded_head_and_tail_kept(
    fake_broker: FakeBroker, make_runner: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(n: int) -> Any:
        if n == 0:
            raise ValueError("x" * 3000)  # a long message
        return across(n - 1)

    def across(n: int) -> Any:  # two functions by turns: Python folds no repeated frame
        return down(n)

    def deep(payload: Any) -> Any:
        return down(100)

    monkeypatch.setitem(handlers.REGISTRY, "deep", handlers.Handler("deep", deep))
    fake_broker.add("t1", {}, type_="deep")

    make_runner().tick()

    ((_, _, error),) = fake_broker.nacks
    assert len(error) <= MAX_ERROR_CHARS
    summary, rest = error.split("\n", 1)
    assert summary == "ValueError: " + "x" * 987 + "…"  # cut to 1000 characters
    assert rest.startswith("...\n")  # the traceback's head left out, its tail kept:
    assert 'raise ValueError("x" * 3000)  # a long message\n' in rest[-200:]


def test_runner__type_without_handler__nacked_naming_the_type(
    fake_broker: FakeBroker, make_runner: MakeRunner
) -> None:
    fake_broker.add("t1", {}, type_="nope")

    assert make_runner().tick() == "nacked"

    error = "no handler for job type 'nope' on this worker"
    assert fake_broker.nacks == [("t1", "lease-t1", error)]


def test_runner__typed_task__acks_handler_result(
    fake_broker: FakeBroker, make_runner: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Double:
        def handler(self, payload: Any) -> Any:
            return {"twice": payload["n"] * 2}

    register(monkeypatch, "double", Double())
    fake_broker.add("t1", {"n": 21}, type_="double")

    make_runner().tick()

    assert fake_broker.acks == [("t1", "lease-t1", {"twice": 42})]


def test_runner__result_not_json__nacks_saying_so(
    fake_broker: FakeBroker, make_runner: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    class ReturnsSet:
        def handler(self, payload: Any) -> Any:
            return {1, 2}

    register(monkeypatch, "set", ReturnsSet())
    fake_broker.add("t1", {}, type_="set")

    assert make_runner().tick() == "nacked"

    ((task_id, _, error),) = fake_broker.nacks
    assert task_id == "t1"
    assert error.startswith("handler result is not JSON")


def test_runner__broker_refuses_ack__outcome_says_so(
    fake_broker: FakeBroker, make_runner: MakeRunner
) -> None:
    fake_broker.answer = False
    fake_broker.add("t1", {"line": "x"})

    assert make_runner().tick() == "ack refused"


def test_runner__task_handled__one_line_each_a_failure_a_warning_with_type_and_error(
    fake_broker: FakeBroker,
    make_runner: MakeRunner,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO, logger="workers")
    monkeypatch.setitem(
        handlers.REGISTRY, "resize", handlers.Handler("resize", lambda payload: payload["width"])
    )
    fake_broker.add("t1", {"line": "x"})
    fake_broker.add("t2", {"fail": True})
    fake_broker.add("t3", {}, type_="resize")
    runner = make_runner()

    for _ in range(3):
        runner.tick()

    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "workers.runner"]
    assert len(lines) == 3
    assert lines[0][0] == "INFO" and lines[0][1].startswith("task t1 acked in ")
    assert [level for level, _ in lines[1:]] == ["WARNING", "WARNING"]
    assert lines[1][1].startswith("task t2 (untyped) nacked in ")
    assert lines[1][1].endswith(" s: payload asked to fail")
    assert lines[2][1].startswith("task t3 (resize) nacked in ")
    assert lines[2][1].endswith(" s: KeyError: 'width'")  # one line: the traceback is stored


def test_runner__slow_task__heartbeat_extends_lease(
    fake_broker: FakeBroker, make_runner: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(monkeypatch, "slow", Job(0.5, {"slept": 0.5}))
    fake_broker.add("t1", {}, type_="slow")

    started = time.monotonic()
    make_runner(lease_ms=200).tick()  # heartbeat every 100 ms
    took = time.monotonic() - started

    # Each beat comes a whole interval after the last, so a task held for `took` seconds (0.5
    # and more on a loaded machine) was extended at most took / 0.1 times.
    assert 3 <= len(fake_broker.extends) <= took / 0.1 + 1e-6
    assert set(fake_broker.extends) == {("t1", "lease-t1", 200)}
    assert fake_broker.acks == [("t1", "lease-t1", {"slept": 0.5})]


def test_runner__fast_task__no_extend(fake_broker: FakeBroker, make_runner: MakeRunner) -> None:
    fake_broker.add("t1", {"line": "x"})

    make_runner(lease_ms=200).tick()
    time.sleep(0.25)  # past the first heartbeat: the lease was released before it

    assert fake_broker.extends == []


def test_runner__lease_lost__heartbeat_stops_extending(
    fake_broker: FakeBroker, make_runner: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_broker.extend_answer = False
    register(monkeypatch, "slow", Job(0.4, {"slept": 0.4}))
    fake_broker.add("t1", {}, type_="slow")

    make_runner(lease_ms=100).tick()

    assert len(fake_broker.extends) == 1


def run_in_thread(runner: Runner) -> threading.Thread:
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    return thread


def test_runner__stop_while_handling__finishes_and_acks_then_exits(
    fake_broker: FakeBroker, make_runner: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = Job(0.5, {"slept": 0.5})
    register(monkeypatch, "slow", slow)
    fake_broker.add("t1", {}, type_="slow")
    runner = make_runner(concurrency=3, wait_ms=20000)
    thread = run_in_thread(runner)
    assert slow.started.wait(5)

    runner.stop()
    thread.join(5)

    assert not thread.is_alive()
    assert fake_broker.acks == [("t1", "lease-t1", {"slept": 0.5})]


def test_runner__stop_while_parked__returns_promptly(
    fake_broker: FakeBroker, make_runner: MakeRunner
) -> None:
    runner = make_runner(concurrency=3, wait_ms=20000)
    thread = run_in_thread(runner)
    assert wait_until(lambda: fake_broker.claims == 3)

    # Parked claims get the grace to answer, then are cut.
    assert stop_joined(runner, thread) < runner.claim_grace_s + 1.0
    assert fake_broker.claims == 3


def test_runner__many_tasks_many_threads__each_acked_once(
    fake_broker: FakeBroker, make_runner: MakeRunner, log_file: Path
) -> None:
    for n in range(200):
        fake_broker.add(f"t{n}", {"line": f"hello {n}"})
    runner = make_runner(concurrency=4, wait_ms=20000)
    thread = run_in_thread(runner)
    assert wait_until(lambda: len(fake_broker.acks) == 200)

    runner.stop()
    thread.join(5)

    assert sorted(a[0] for a in fake_broker.acks) == sorted(f"t{n}" for n in range(200))
    ids = [json.loads(line)["id"] for line in log_file.read_text().splitlines()]
    assert sorted(ids) == sorted(f"t{n}" for n in range(200))


def test_runner__claim_errors__thread_backs_off_and_survives(
    fake_broker: FakeBroker, make_runner: MakeRunner
) -> None:
    fake_broker.claim_errors.extend([BrokerError(401, "Bad token."), RuntimeError("bug")])
    fake_broker.add("t1", {"line": "x"})
    runner = make_runner(concurrency=1, wait_ms=20000, error_backoff_s=0.01)
    thread = run_in_thread(runner)

    assert wait_until(lambda: len(fake_broker.acks) == 1)
    runner.stop()
    thread.join(5)

    assert fake_broker.claims >= 3
    assert not thread.is_alive()

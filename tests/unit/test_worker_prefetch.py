"""Prefetch mode: Runner(prefetch=N) on the FakeBroker: limit, settle-and-claim, linger, stop."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.worker_fakes import FakeBroker, Job, register, stop_joined, wait_until
from workers.client import BrokerError
from workers.runner import Runner

MakeRunner = Callable[..., Runner]


@pytest.fixture
def prefetching(make_runner: MakeRunner) -> Iterator[MakeRunner]:
    """Prefetching runners on fake_broker, in threads; each is stopped and joined at teardown."""
    made: list[tuple[Runner, threading.Thread]] = []

    def make(start: bool = True, **kwargs: Any) -> Runner:
        kwargs.setdefault("wait_ms", 20000)
        kwargs.setdefault("prefetch", 4)
        runner = make_runner(**kwargs)
        runner.claim_grace_s = 0.05
        thread = threading.Thread(target=runner.run, daemon=True)
        made.append((runner, thread))
        if start:
            thread.start()
        return runner

    yield make
    for runner, thread in made:
        runner.stop()
        if thread.is_alive():
            thread.join(10)


def acked(fake_broker: FakeBroker) -> list[str]:
    return sorted(t for t, _, _ in fake_broker.acks)


def test_prefetch__many_tasks__each_run_and_acked_once(
    fake_broker: FakeBroker, prefetching: MakeRunner, log_file: Path
) -> None:
    ids = [f"t{n}" for n in range(300)]
    for task_id in ids:
        fake_broker.add(task_id, {"line": task_id})

    prefetching(concurrency=4, prefetch=3)

    assert wait_until(lambda: len(fake_broker.acks) == 300)
    assert acked(fake_broker) == sorted(ids)
    lines = [json.loads(line)["id"] for line in log_file.read_text().splitlines()]
    assert sorted(lines) == sorted(ids)


def test_prefetch__limit__never_more_than_concurrency_times_prefetch_in_hand(
    fake_broker: FakeBroker, prefetching: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(monkeypatch, "pause", Job(seconds=0.002))
    fake_broker.add_typed(120, "pause")

    prefetching(concurrency=2, prefetch=3)

    assert wait_until(lambda: len(fake_broker.acks) == 120)
    assert fake_broker.max_outstanding == 6
    assert max(max_n for _, _, max_n, _ in fake_broker.settle_claims) <= 6


def test_prefetch__drain__acks_ride_with_the_next_claims(
    fake_broker: FakeBroker, prefetching: MakeRunner
) -> None:
    for n in range(200):
        fake_broker.add(f"t{n}", {"line": f"hello {n}"})

    prefetching(concurrency=3, prefetch=4)

    assert wait_until(lambda: len(fake_broker.acks) == 200)
    riding = sum(len(acks) for acks, _, _, _ in fake_broker.settle_claims)
    requests = len(fake_broker.settle_claims) + sum(e[0] == "settle" for e in fake_broker.events)
    assert riding >= 150  # the tail may go alone once no claim is going out
    assert requests <= 200 / 3  # several tasks per round trip, not two round trips each


def test_prefetch__last_task_done__ack_sent_while_parked(
    fake_broker: FakeBroker, prefetching: MakeRunner
) -> None:
    prefetching(concurrency=3, prefetch=4)
    assert wait_until(lambda: fake_broker.parked == 1)
    fake_broker.add("t1", {"line": "hello 1"})

    # Nothing else comes: the worker parks again, and must not hold t1's ack meanwhile.
    assert wait_until(lambda: len(fake_broker.acks) == 1, 1.0)
    assert wait_until(lambda: fake_broker.parked == 1, 1.0)
    assert fake_broker.nacks == []


def test_prefetch__task_ends_while_a_claim_is_parked__acked_at_once(
    fake_broker: FakeBroker, prefetching: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = register(monkeypatch, "slow", Job(seconds=0.3))
    fake_broker.add("t1", {}, type_="slow")
    prefetching(concurrency=3, prefetch=4)
    assert slow.started.wait(2)
    assert wait_until(lambda: fake_broker.parked == 1)  # claiming more while t1 runs

    assert slow.finished.wait(2)
    finished_at = time.monotonic()
    assert wait_until(lambda: acked(fake_broker) == ["t1"], 2.0)

    # At once (milliseconds), not when the parked claim ends its wait (seconds); room for load.
    assert time.monotonic() - finished_at < 1.0
    assert fake_broker.parked == 1  # the parked claim was not cut to carry it


# Until task durations are known, one waiting per thread: 2 x concurrency, 100 at most.
@pytest.mark.parametrize(("concurrency", "prefetch", "max_n"), [(3, 4, 6), (50, 4, 100)])
def test_prefetch__one_idle_worker__one_parked_claim(
    fake_broker: FakeBroker, prefetching: MakeRunner, concurrency: int, prefetch: int, max_n: int
) -> None:
    prefetching(concurrency=concurrency, prefetch=prefetch)

    assert wait_until(lambda: fake_broker.parked == 1)
    time.sleep(0.2)
    # One claim parks (at most 100 asked at once); the other pump stays free to settle.
    assert (fake_broker.claims, fake_broker.parked) == (1, 1)
    ((acks, nacks, asked, wait_ms),) = fake_broker.settle_claims
    assert (acks, nacks, asked, wait_ms) == ([], [], max_n, 20000)


def slow_then_quick(
    fake_broker: FakeBroker, monkeypatch: pytest.MonkeyPatch, seconds: float, quick: int
) -> Job:
    """t1 of a job type that takes `seconds`, then t2.. (`quick` of them) plain lines: t1's job."""
    slow = register(monkeypatch, "slow", Job(seconds=seconds))
    fake_broker.add("t1", {}, type_="slow")
    for n in range(2, quick + 2):
        fake_broker.add(f"t{n}", {"line": f"hello {n}"})
    return slow


def test_prefetch__quick_task_beside_slow_one__its_ack_goes_within_the_linger(
    fake_broker: FakeBroker, prefetching: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = slow_then_quick(fake_broker, monkeypatch, 1.0, 1)

    prefetching(concurrency=2, prefetch=2)

    assert slow.started.wait(2)
    assert wait_until(lambda: acked(fake_broker) == ["t2"], 0.3)
    assert not slow.finished.is_set()


def test_prefetch__tasks_waiting_their_turn__leases_extended(
    fake_broker: FakeBroker, prefetching: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = slow_then_quick(fake_broker, monkeypatch, 0.4, 2)

    prefetching(concurrency=1, prefetch=3, heartbeat_s=0.05)

    assert slow.started.wait(2)
    assert wait_until(lambda: acked(fake_broker) == ["t1", "t2", "t3"], 3)
    extended = {task_id for task_id, _, _ in fake_broker.extends}
    assert "t2" in extended  # claimed with t1, beaten while t1 ran, before its own turn


def test_prefetch__stop_with_tasks_prefetched__runs_and_acks_them_then_ends(
    fake_broker: FakeBroker, prefetching: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = slow_then_quick(fake_broker, monkeypatch, 0.3, 7)
    runner = prefetching(concurrency=1, prefetch=4)
    assert slow.started.wait(2)
    claims_before = fake_broker.claims
    left = {d["task"]["id"] for d in fake_broker.deliveries}
    held = {f"t{n}" for n in range(1, 9)} - left
    assert len(held) >= 2  # t1 running, at least one more waiting its turn

    runner.stop()

    assert wait_until(lambda: set(acked(fake_broker)) == held, 3)
    assert fake_broker.claims == claims_before
    assert {d["task"]["id"] for d in fake_broker.deliveries} == left
    assert fake_broker.outstanding == 0


def test_prefetch__long_tasks__few_wait_their_turn(
    fake_broker: FakeBroker, prefetching: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(monkeypatch, "long", Job(seconds=0.1))
    fake_broker.add_typed(12, "long")

    # 2 threads x 16 could hold all 12; 0.05 s ahead of 0.1 s tasks allows one waiting.
    prefetching(concurrency=2, prefetch=16, prefetch_ahead_s=0.05)

    assert wait_until(lambda: len(fake_broker.acks) == 12, 5)
    assert fake_broker.max_outstanding <= 4  # one each until timed, then 2 + 1


def test_prefetch__a_thread_with_nothing_to_start__a_claim_looks_for_work(
    fake_broker: FakeBroker, prefetching: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = register(monkeypatch, "slow", Job(seconds=1.0))
    fake_broker.add("t1", {"line": "hello 1"})
    fake_broker.add("t2", {}, type_="slow")
    fake_broker.add("t3", {}, type_="slow")
    prefetching(concurrency=3, prefetch=1)
    assert wait_until(lambda: acked(fake_broker) == ["t1"])

    fake_broker.add("t4", {"line": "hello 4"})  # for the thread t1 left idle

    assert wait_until(lambda: acked(fake_broker) == ["t1", "t4"], 0.5)
    assert not slow.finished.is_set()


def test_prefetch__stop_while_parked__run_returns_promptly(
    fake_broker: FakeBroker, prefetching: MakeRunner
) -> None:
    runner = prefetching(start=False, concurrency=3, prefetch=4)
    thread = threading.Thread(target=runner.run)
    thread.start()
    assert wait_until(lambda: fake_broker.parked == 1)

    assert stop_joined(runner, thread) < runner.claim_grace_s + 1.0


def test_prefetch__ack_refused_for_its_result__nacked_instead(
    fake_broker: FakeBroker, prefetching: MakeRunner
) -> None:
    fake_broker.ack_statuses["t1"] = 413
    fake_broker.add("t1", {"line": "hello 1"})
    fake_broker.add("t2", {"line": "hello 2"})

    prefetching(concurrency=1, prefetch=2)

    assert wait_until(lambda: len(fake_broker.nacks) == 1 and len(fake_broker.acks) == 1)
    ((task_id, _, error),) = fake_broker.nacks
    assert (task_id, error) == (
        "t1",
        "the broker refused the handler result (413: over its body limit)",
    )


def test_prefetch__claim_refused__backs_off_without_spinning(
    fake_broker: FakeBroker, prefetching: MakeRunner
) -> None:
    fake_broker.claim_errors.extend([BrokerError(401, "Bad token.")] * 50)

    prefetching(concurrency=2, prefetch=2, error_backoff_s=0.2)
    time.sleep(0.5)

    assert 1 <= fake_broker.claims <= 4


def test_prefetch__claim_refused_then_accepted__tasks_run(
    fake_broker: FakeBroker, prefetching: MakeRunner
) -> None:
    fake_broker.claim_errors.append(BrokerError(401, "Bad token."))
    fake_broker.add("t1", {"line": "hello 1"})

    prefetching(concurrency=2, prefetch=2, error_backoff_s=0.01)

    assert wait_until(lambda: acked(fake_broker) == ["t1"])


def test_prefetch__with_batch__refused() -> None:
    with pytest.raises(ValueError, match="choose one"):
        Runner(FakeBroker(), batch=5, prefetch=2)

"""Batch mode: Runner(batch=N) on the FakeBroker, the client's batch calls, produce --batch."""

from __future__ import annotations

import functools
import io
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.worker_fakes import FakeBroker, FakeServer, Job, Reply, delivery, register, wait_until
from workers import producer
from workers.client import BrokerClient
from workers.management.commands import produce, runworker
from workers.runner import Runner

MakeClient = Callable[..., BrokerClient]
TEMPLATE = producer.body_template(
    fail=False, max_attempts=3, delay_ms=0, queue="default", priority="normal"
)


@pytest.fixture
def batch_runner(make_runner: Callable[..., Runner]) -> Callable[..., Runner]:
    """Runners in batch mode (10 unless given) on fake_broker."""
    return functools.partial(make_runner, batch=10)


# -- the runner ---------------------------------------------------------------------------------


def test_batch_runner__slow_second_task__first_ack_not_held_back(
    fake_broker: FakeBroker, batch_runner: Callable[..., Runner], monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = register(monkeypatch, "slow", Job(seconds=1.0))
    fake_broker.add("t1", {"line": "hello 1"})
    fake_broker.add("t2", {}, type_="slow")
    runner = batch_runner()
    thread = threading.Thread(target=runner.tick_batch)
    thread.start()

    assert wait_until(lambda: fake_broker.acks != [], 0.5)
    assert not slow.finished.is_set()
    assert fake_broker.ack_batches == [["t1"]]
    thread.join()
    runner.close()
    assert fake_broker.ack_batches == [["t1"], ["t2"]]
    assert fake_broker.claims == 1


def test_batch_runner__claimed_tasks__all_heartbeaten_while_waiting_their_turn(
    fake_broker: FakeBroker, batch_runner: Callable[..., Runner], monkeypatch: pytest.MonkeyPatch
) -> None:
    register(monkeypatch, "slow", Job(seconds=0.3))
    fake_broker.add("t1", {}, type_="slow")
    fake_broker.add("t2", {"line": "hello 2"})

    assert batch_runner(heartbeat_s=0.05).tick_batch() == 2

    # t2 sat in hand while t1 ran: its lease was extended before its turn came.
    assert ("t2", "lease-t2", 30000) in fake_broker.extends


def test_batch_runner__failures_and_bad_results__one_nack_batch(
    fake_broker: FakeBroker, batch_runner: Callable[..., Runner], monkeypatch: pytest.MonkeyPatch
) -> None:
    # t2 runs once t1's ack is in flight, which stays open until all three have run.
    register(monkeypatch, "boom", Job(result=ValueError("boom"), after=fake_broker.first_settle))
    register(monkeypatch, "nan", Job(result=math.nan))
    fake_broker.settle_gate = gate = threading.Event()
    fake_broker.add("t1", {"line": "hello 1"})
    fake_broker.add("t2", {}, type_="boom")
    fake_broker.add("t3", {}, type_="nan")
    runner = batch_runner()

    runner.tick_batch()
    gate.set()
    runner.close()

    assert [t for t, _, _ in fake_broker.acks] == ["t1"]
    assert fake_broker.nack_batches == [["t2", "t3"]]
    (_, lease, error), (_, _, bad) = fake_broker.nacks
    assert (lease, error.partition("\n")[0]) == ("lease-t2", "ValueError: boom")
    assert bad.startswith("handler result is not JSON")


def test_batch_runner__acks_in_flight__later_ones_coalesce(
    fake_broker: FakeBroker, batch_runner: Callable[..., Runner], monkeypatch: pytest.MonkeyPatch
) -> None:
    # t2 runs once t1's ack is in flight, which stays open until all five have run.
    register(monkeypatch, "pause", Job(after=fake_broker.first_settle))
    fake_broker.settle_gate = gate = threading.Event()
    fake_broker.add("t1", {"line": "hello 1"})
    fake_broker.add("t2", {}, type_="pause")
    for n in range(3, 6):
        fake_broker.add(f"t{n}", {"line": f"hello {n}"})
    runner = batch_runner()

    assert runner.tick_batch() == 5
    gate.set()
    runner.close()

    assert fake_broker.ack_batches == [["t1"], ["t2", "t3", "t4", "t5"]]


def test_batch_runner__stop_with_tasks_claimed__runs_and_acks_them_all(
    fake_broker: FakeBroker, batch_runner: Callable[..., Runner], monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = register(monkeypatch, "slow", Job(seconds=0.3))
    fake_broker.add("t1", {}, type_="slow")
    fake_broker.add("t2", {"line": "hello 2"})
    fake_broker.add("t3", {"line": "hello 3"})
    runner = batch_runner(concurrency=1, wait_ms=5000)
    runner.claim_grace_s = 0.0
    thread = threading.Thread(target=runner.run)
    thread.start()
    assert slow.started.wait(2)

    runner.stop()
    thread.join(5)

    assert not thread.is_alive()
    assert sorted(t for t, _, _ in fake_broker.acks) == ["t1", "t2", "t3"]


def test_batch_runner__refused_ack__logged_as_refused(
    fake_broker: FakeBroker, batch_runner: Callable[..., Runner], caplog: pytest.LogCaptureFixture
) -> None:
    fake_broker.answer = False
    fake_broker.add("t1", {"line": "hello 1"})
    runner = batch_runner()

    with caplog.at_level(logging.INFO, logger="workers.runner"):
        runner.tick_batch()
        runner.close()

    assert "task t1 ack refused" in caplog.text


# -- the client ---------------------------------------------------------------------------------


def test_client__claim_many_503_then_200__body_and_deliveries(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    got = [delivery("t1", None), delivery("t2", None)]
    http_broker.script("POST", "/jobs/claim", Reply(503), Reply(200, {"deliveries": got}))
    client = make_client(http_broker.url)

    assert client.claim_many(5, 100, 2000, ["a", "b"]) == got
    seen = http_broker.requests_to("POST", "/jobs/claim")[-1]
    assert seen.body == {"max": 5, "wait_ms": 100, "lease_ms": 2000, "queues": ["a", "b"]}


def test_client__claim_many_204__empty(http_broker: FakeServer, make_client: MakeClient) -> None:
    http_broker.script("POST", "/jobs/claim", Reply(204))

    assert make_client(http_broker.url).claim_many(5, 0, 1000) == []
    assert http_broker.requests_to("POST", "/jobs/claim")[0].body == {
        "max": 5,
        "wait_ms": 0,
        "lease_ms": 1000,
    }


def test_client__claim_many_cancelled__parked_claim_returns_empty(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("POST", "/jobs/claim", Reply(204, hold_s=10))
    client = make_client(http_broker.url)
    threading.Timer(0.2, client.cancel_claims).start()
    started = time.monotonic()

    assert client.claim_many(5, 10000, 1000) == []
    assert time.monotonic() - started < 2


def test_client__ack_many__items_in_body_per_item_answers(
    http_broker: FakeServer, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    results = [{"id": "t1", "status": 204}, {"id": "t2", "status": 409, "error": "No."}]
    http_broker.script("POST", "/jobs/ack", Reply(502), Reply(200, {"results": results}))
    client = make_client(http_broker.url)

    assert client.ack_many([("t1", "l1", {"n": 1}), ("t2", "l2", None)]) == [True, False]
    assert http_broker.requests_to("POST", "/jobs/ack")[-1].body == {
        "acks": [
            {"id": "t1", "lease_id": "l1", "result": {"n": 1}},
            {"id": "t2", "lease_id": "l2", "result": None},
        ]
    }
    assert "ack of task t2 answered 409" in caplog.text


def test_client__nack_many__errors_cut_to_limit(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("POST", "/jobs/nack", Reply(200, {"results": [{"id": "t1", "status": 204}]}))

    assert make_client(http_broker.url).nack_many([("t1", "l1", "x" * 9000)]) == [True]
    (item,) = http_broker.requests_to("POST", "/jobs/nack")[0].body["nacks"]
    assert (item["id"], item["lease_id"], len(item["error"])) == ("t1", "l1", 8000)


def test_client__ack_many_502_past_first_lease__gives_up_at_its_end(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    got = [delivery("t1", None), delivery("t2", None)]
    http_broker.script("POST", "/jobs/claim", Reply(200, {"deliveries": got}))
    http_broker.default("POST", "/jobs/ack", Reply(502))  # a 503 would push past the lease
    client = make_client(http_broker.url, give_up_s=60.0)
    client.claim_many(2, 0, 400)
    started = time.monotonic()

    assert client.ack_many([("t1", "lease-t1", None), ("t2", "lease-t2", None)]) == [False, False]
    assert 0.2 < time.monotonic() - started < 2.0
    assert len(http_broker.requests_to("POST", "/jobs/ack")) > 2


def test_client__enqueue_many__jobs_in_body_status_and_ids(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("POST", "/jobs/batch", Reply(503), Reply(201, {"ids": ["1", "2"]}))
    bodies = [{"payload": 1, "idempotency_key": "mine"}, {"payload": 2}]

    answer = make_client(http_broker.url).enqueue_many(bodies)

    assert answer == (201, {"ids": ["1", "2"]})
    first, retry = (s.body["jobs"] for s in http_broker.requests_to("POST", "/jobs/batch"))
    assert first == retry  # the retry repeats every key: a batch that committed answers its ids
    assert first[0] == {"payload": 1, "idempotency_key": "mine"}
    assert first[1]["payload"] == 2 and len(first[1]["idempotency_key"]) == 32


# -- produce --batch and runworker --batch ------------------------------------------------------


def test_produce__batch__chunks_of_n_each_line_once_rejects_counted_per_task(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.default("POST", "/jobs/batch", Reply(201, {"ids": []}))
    http_broker.script("POST", "/jobs/batch", Reply(400, {"error": "No."}))

    summary = producer.produce(make_client(http_broker.url), 10, TEMPLATE, concurrency=1, batch=4)

    seen = http_broker.requests_to("POST", "/jobs/batch")
    assert [len(s.body["jobs"]) for s in seen] == [4, 4, 2]
    lines = [job["payload"]["line"] for s in seen for job in s.body["jobs"]]
    assert lines == [f"hello {n}" for n in range(1, 11)]
    assert (summary.sent, summary.rejected) == (6, 4)
    assert http_broker.requests_to("POST", "/jobs") == []


def test_produce_command__batch__summary_line_and_exit_0(http_broker: FakeServer) -> None:
    http_broker.default("POST", "/jobs/batch", Reply(201, {"ids": []}))
    out = io.StringIO()

    call_command(
        produce.Command(),
        "--broker",
        http_broker.url,
        "-n",
        "7",
        "--batch",
        "3",
        "--concurrency",
        "2",
        stdout=out,
        stderr=io.StringIO(),
    )

    assert out.getvalue().startswith("sent 7, rejected 0 in ")
    assert len(http_broker.requests_to("POST", "/jobs/batch")) == 3


@pytest.mark.parametrize(
    ("command", "flag"), [(produce, "1001"), (runworker, "101"), (runworker, "0")]
)
def test_batch_flag__out_of_range__usage_error(command: Any, flag: str) -> None:
    with pytest.raises(CommandError, match="batch"):
        call_command(command.Command(), "--batch", flag, stdout=io.StringIO())


def test_runworker__batch_flag__default_1() -> None:
    parser = runworker.Command().create_parser("manage.py", "runworker")

    assert parser.parse_args([]).batch == 1
    assert parser.parse_args(["--batch", "100"]).batch == 100

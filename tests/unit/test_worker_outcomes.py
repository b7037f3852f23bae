"""Every handler outcome ends in an ack or a nack, through the real client, in every mode."""

from __future__ import annotations

import io
import logging
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.api_fake import ApiFake
from tests.worker_fakes import FakeBroker, FakeServer, register, wait_until
from workers import handlers
from workers.client import BrokerClient
from workers.management.commands import runworker
from workers.runner import Runner

MakeClient = Callable[..., BrokerClient]
MODES = ["single", "batch", "prefetch"]


class Returns:
    """A job type whose handler returns the value it was built with."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def handler(self, payload: Any) -> Any:
        return self.value


class Sleeps:
    """A job type that sleeps 0.2 s: long enough for a 0.05 s heartbeat to beat."""

    def handler(self, payload: Any) -> None:
        threading.Event().wait(0.2)


def run_all(runner: Runner, mode: str, api: ApiFake, n: int) -> None:
    """Run the runner in mode until the n queued tasks are settled."""
    if mode == "single":
        for _ in range(n):
            runner.tick()
        runner.close()
    elif mode == "batch":
        runner.tick_batch()
        runner.close()
    else:
        thread = threading.Thread(target=runner.run)
        thread.start()
        wait_until(lambda: api.settled() == n)
        runner.stop()
        thread.join(10)


def make_runner(client: BrokerClient, mode: str, tmp_path: Path, **kwargs: Any) -> Runner:
    runner = Runner(
        client,
        resolve=handlers.Dispatch(str(tmp_path / "jobs.log")),
        concurrency=1 if mode != "prefetch" else 2,
        wait_ms=0 if mode != "prefetch" else 20000,
        batch=10 if mode == "batch" else 1,
        prefetch=4 if mode == "prefetch" else 0,
        **kwargs,
    )
    runner.claim_grace_s = 0.05
    return runner


@pytest.fixture
def api_4k(http_broker: FakeServer) -> ApiFake:
    """The fake API over http_broker with a 4096-byte body limit."""
    http_broker.max_body = 4096
    return ApiFake(http_broker)


@pytest.fixture
def runner_for(
    http_broker: FakeServer, make_client: MakeClient, tmp_path: Path
) -> Callable[..., Runner]:
    """runner_for(mode, **kwargs) → a Runner in that mode on a real client to http_broker."""
    return lambda mode, **kwargs: make_runner(
        make_client(http_broker.url), mode, tmp_path, **kwargs
    )


@pytest.mark.parametrize("mode", MODES)
def test_runner__results_no_ack_can_carry__nacked_with_why(
    api_4k: ApiFake, runner_for: Callable[..., Runner], monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    api = api_4k
    for name, value in [
        ("nan", math.nan),
        ("inf", {"x": -math.inf}),
        ("set", {1, 2}),
        ("big", "x" * 5000),
        ("fine", {"n": 1}),
    ]:
        register(monkeypatch, name, Returns(value))
        api.add(name, {}, type_=name)

    run_all(runner_for(mode, max_body_bytes=4096), mode, api, 5)

    assert api.acked == {"fine": {"n": 1}}
    errors = {task_id: error for task_id, (error,) in api.nacked.items()}
    not_json = "handler result is not JSON: Out of range float values are not JSON compliant"
    assert errors == {
        "nan": not_json,
        "inf": not_json,
        "set": "handler result is not JSON: Object of type set is not JSON serializable",
        "big": "handler result is 5002 bytes of JSON, over the 3072 an ack can carry "
        "(the broker's body limit is 4096 bytes)",
    }


@pytest.mark.parametrize("mode", MODES)
def test_runner__broker_limit_lower_than_assumed__413_then_nacked(
    api_4k: ApiFake, runner_for: Callable[..., Runner], monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    api = api_4k  # the worker assumes the default limit, 256 KiB
    register(monkeypatch, "big", Returns("x" * 5000))
    api.add("t1", {"line": "hello 1"})
    api.add("t2", {}, type_="big")
    api.add("t3", {"line": "hello 3"})

    run_all(runner_for(mode), mode, api, 3)

    assert api.acked == {"t1": None, "t3": None}
    assert api.nacked == {
        "t2": ["the broker refused the handler result (413: over its body limit)"]
    }


def test_runworker__lease_over_the_broker_cap__usage_error_naming_it() -> None:
    with pytest.raises(CommandError, match="at most 300000"):
        call_command(runworker.Command(), "--lease-ms", "300001", stdout=io.StringIO())


def test_runworker__lease_at_the_cap__accepted() -> None:
    parser = runworker.Command().create_parser("manage.py", "runworker")

    assert parser.parse_args(["--lease-ms", "300000"]).lease_ms == 300000


def test_runner__lease_over_the_cap__lowered_with_a_warning_and_beaten_at_it(
    fake_broker: FakeBroker, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(monkeypatch, "slow", Sleeps())
    fake_broker.add("t1", {}, type_="slow")

    with caplog.at_level(logging.WARNING, logger="workers.runner"):
        runner = Runner(fake_broker, lease_ms=400_000, wait_ms=0, heartbeat_s=0.05)
    runner.tick()
    runner.close()

    assert {lease_ms for _, _, lease_ms in fake_broker.extends} == {300_000}
    assert "lease of 400000 ms lowered to the broker's cap, 300000 ms" in caplog.text
    assert runner.lease_ms == 300_000


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("bad!name", "not a queue name"),
        ("ok,a b", "not a queue name"),
        ("x" * 65, "not a queue name"),
        ("", "no queue named"),
        (",", "no queue named"),
    ],
)
def test_runworker__queue_the_broker_cannot_name__usage_error(given: str, says: str) -> None:
    with pytest.raises(CommandError, match=says):
        call_command(runworker.Command(), "--queue", given, stdout=io.StringIO())


@pytest.mark.parametrize("command", ["runworker", "produce", "submit"])
@pytest.mark.parametrize("broker", ["ftp://x", "localhost:8080", "http://", "http://[::1"])
def test_commands__broker_url_not_http__usage_error_not_a_traceback(
    command: str, broker: str
) -> None:
    with pytest.raises(CommandError, match="broker URL must be http:// or https://"):
        call_command(command, "--broker", broker, stdout=io.StringIO(), stderr=io.StringIO())


@pytest.mark.parametrize("command", ["produce", "submit"])
def test_commands__queue_the_broker_cannot_name__usage_error(command: str) -> None:
    with pytest.raises(CommandError, match="not a queue name"):
        call_command(command, "--queue", "bad q", stdout=io.StringIO(), stderr=io.StringIO())


def test_runworker__batch_and_prefetch__usage_error_exit_2() -> None:
    with pytest.raises(CommandError, match="two modes") as refused:
        call_command(runworker.Command(), "--batch", "20", "--prefetch", "10")
    assert refused.value.returncode == 2


@pytest.mark.parametrize(("given", "queues"), [("a,b", ["a", "b"]), (" a , a,b ", ["a", "b"])])
def test_runworker__queue_list__names_once_each(given: str, queues: list[str]) -> None:
    parser = runworker.Command().create_parser("manage.py", "runworker")

    assert parser.parse_args(["--queue", given]).queue == queues
    assert parser.parse_args([]).queue == []  # left out: every queue

"""produce: bodies, counts and the summary line, against the fake HTTP broker."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.worker_fakes import FakeServer, Reply, start_server
from workers import producer
from workers.client import BrokerClient
from workers.management.commands import produce

MakeClient = Callable[..., BrokerClient]
# How many were enqueued, how long it took: the last line of every run.
SUMMARY = re.compile(r"^sent (\d+), rejected (\d+) in (\d+\.\d) s \((\d+\.\d) tasks/s\)$")
TEMPLATE = producer.body_template(
    fail=False, max_attempts=3, delay_ms=0, queue="default", priority="normal"
)


class TTY(io.StringIO):
    """A captured stream that claims to be a terminal."""

    def isatty(self) -> bool:
        return True


def test_produce__some_rejected__summary_counts(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    ok, no = Reply(201, {"id": "x"}), Reply(400, {"error": "No."})
    http_broker.script("POST", "/jobs", ok, no, ok, ok, no, ok, ok, no, ok, ok)

    summary = producer.produce(make_client(http_broker.url), 10, TEMPLATE, concurrency=3)

    assert (summary.sent, summary.rejected, summary.ok) == (7, 3, False)
    assert re.match(r"^sent 7, rejected 3 in \d+\.\d s \(\d+\.\d tasks/s\)$", summary.line())


def test_produce__refused__the_first_refusal_logged_once_with_why(
    http_broker: FakeServer, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    http_broker.default("POST", "/jobs", Reply(401, {"error": "Missing or wrong credentials."}))

    summary = producer.produce(make_client(http_broker.url), 5, TEMPLATE, concurrency=2)

    assert (summary.sent, summary.rejected) == (0, 5)
    refusals = [r.getMessage() for r in caplog.records if r.name == "workers.producer"]
    assert refusals == [
        "the broker refused a task: 401 Missing or wrong credentials."
        " (set BROKER_API_TOKEN to one of the broker's BROKER_API_TOKENS)"
    ]


def test_produce__bodies__numbered_lines_and_the_given_fields(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.default("POST", "/jobs", Reply(201, {"id": "x"}))
    template = producer.body_template(
        fail=True, max_attempts=5, delay_ms=250, queue="q1", priority="high"
    )

    summary = producer.produce(make_client(http_broker.url), 4, template, concurrency=2)

    bodies = [s.body for s in http_broker.requests_to("POST", "/jobs")]
    assert summary.ok
    assert sorted(b["payload"]["line"] for b in bodies) == [f"hello {n}" for n in range(1, 5)]
    assert all(b["payload"]["fail"] is True for b in bodies)
    assert {(b["max_attempts"], b["delay_ms"], b["queue"], b["priority"]) for b in bodies} == {
        (5, 250, "q1", "high")
    }
    assert len({b["idempotency_key"] for b in bodies}) == 4


def test_produce__broker_unreachable__gives_up_without_sending_everything(
    make_client: MakeClient,
) -> None:
    server, fake = start_server(bind_only=True)  # refuses connections
    try:
        client = make_client(fake.url, give_up_s=0.2)
        summary = producer.produce(client, 50, TEMPLATE, concurrency=2)
    finally:
        server.server_close()

    assert (summary.sent, summary.ok) == (0, False)
    assert summary.line().endswith("; 50 of 50 tasks not sent")


def test_progress_bar__half_done() -> None:
    assert producer.progress_bar(50, 100, width=10) == "[#####.....]  50/100"


def test_produce_command__all_accepted__summary_line_and_exit_0(
    http_broker: FakeServer, workers_logger: object
) -> None:
    http_broker.default("POST", "/jobs", Reply(201, {"id": "x"}))
    out, err = io.StringIO(), io.StringIO()

    call_command(
        produce.Command(),
        "--broker",
        http_broker.url,
        "-n",
        "5",
        "--concurrency",
        "2",
        "--max-attempts",
        "4",
        "--delay-ms",
        "10",
        "--queue",
        "q",
        "--priority",
        "low",
        stdout=out,
        stderr=err,
    )

    match = SUMMARY.match(out.getvalue().rstrip("\n"))
    assert match is not None
    assert match.group(1, 2) == ("5", "0")
    assert err.getvalue() == ""  # not a terminal: no progress bar
    body = http_broker.requests_to("POST", "/jobs")[0].body
    assert (body["max_attempts"], body["delay_ms"], body["queue"], body["priority"]) == (
        4,
        10,
        "q",
        "low",
    )
    assert set(body["payload"]) == {"line"}


def test_produce_command__fail_flag__payloads_fail_true(
    http_broker: FakeServer, workers_logger: object
) -> None:
    http_broker.default("POST", "/jobs", Reply(201, {"id": "x"}))

    call_command(produce.Command(), "--broker", http_broker.url, "--fail", stdout=io.StringIO())

    (seen,) = http_broker.requests_to("POST", "/jobs")
    assert seen.body["payload"] == {"line": "hello 1", "fail": True}
    assert (seen.body["max_attempts"], seen.body["delay_ms"]) == (3, 0)


def test_produce_command__some_rejected__exit_1(
    http_broker: FakeServer, workers_logger: object
) -> None:
    http_broker.script("POST", "/jobs", Reply(201, {"id": "a"}), Reply(400, {"error": "No."}))
    http_broker.default("POST", "/jobs", Reply(201, {"id": "b"}))
    out = io.StringIO()

    with pytest.raises(CommandError) as caught:
        call_command(produce.Command(), "--broker", http_broker.url, "-n", "3", stdout=out)

    assert caught.value.returncode == 1
    match = SUMMARY.match(out.getvalue().rstrip("\n"))
    assert match is not None
    assert match.group(1, 2) == ("2", "1")


def test_produce_command__stderr_is_terminal__progress_bar(
    http_broker: FakeServer, workers_logger: object
) -> None:
    http_broker.default("POST", "/jobs", Reply(201, {"id": "x"}))
    err = TTY()

    call_command(
        produce.Command(), "--broker", http_broker.url, "-n", "5", stdout=io.StringIO(), stderr=err
    )

    assert err.getvalue().startswith("\r[")
    assert err.getvalue().endswith(f"\r{producer.progress_bar(5, 5)}\n")


def test_produce_command__key__every_body_carries_it_one_by_one_and_batched(
    http_broker: FakeServer, workers_logger: object
) -> None:
    http_broker.default("POST", "/jobs", Reply(201, {"id": "x"}))
    http_broker.default("POST", "/jobs/batch", Reply(201, {"ids": ["x", "y"]}))

    for batch in ("1", "2"):
        call_command(
            produce.Command(), "--broker", http_broker.url, "-n", "2", "--batch", batch,
            "--key", "tenant-acme", stdout=io.StringIO(),
        )  # fmt: skip

    singles = [s.body for s in http_broker.requests_to("POST", "/jobs")]
    (batched,) = [s.body["jobs"] for s in http_broker.requests_to("POST", "/jobs/batch")]
    assert [b["key"] for b in singles + batched] == ["tenant-acme"] * 4
    assert len({b["idempotency_key"] for b in singles + batched}) == 4  # not the task's key


def test_produce_command__no_key__bodies_without_one(
    http_broker: FakeServer, workers_logger: object
) -> None:
    http_broker.default("POST", "/jobs", Reply(201, {"id": "x"}))

    call_command(produce.Command(), "--broker", http_broker.url, stdout=io.StringIO())

    (seen,) = http_broker.requests_to("POST", "/jobs")
    assert "key" not in seen.body


@pytest.mark.parametrize("key", ["", "k" * 129])
def test_produce_command__key_out_of_bounds__refused_before_sending(
    http_broker: FakeServer, workers_logger: object, key: str
) -> None:
    with pytest.raises(CommandError, match="a key is 1 to 128 characters"):
        call_command(produce.Command(), "--broker", http_broker.url, "--key", key)

    assert http_broker.requests_to("POST", "/jobs") == []


def test_summary__line__how_many_how_long_how_fast() -> None:
    line = producer.Summary(wanted=2000, sent=2000, rejected=0, elapsed_s=13.04).line()
    assert line == "sent 2000, rejected 0 in 13.0 s (153.4 tasks/s)"
    interrupted = producer.Summary(10, 3, 1, 0.5, interrupted=True).line()
    assert (
        interrupted
        == "interrupted: sent 3, rejected 1 in 0.5 s (6.0 tasks/s); 6 of 10 tasks not sent"
    )
    assert producer.Summary(1, 0, 0, 0.0).line().endswith("; 1 of 1 task not sent")


def test_produce_command__summary_line_says_how_many_and_how_long(
    http_broker: FakeServer, workers_logger: object
) -> None:
    http_broker.default("POST", "/jobs", Reply(201, {"id": "x"}))
    out, err = io.StringIO(), io.StringIO()

    started = time.monotonic()
    call_command(produce.Command(), "--broker", http_broker.url, "-n", "40", stdout=out, stderr=err)
    took = time.monotonic() - started

    match = SUMMARY.match(out.getvalue().rstrip("\n"))
    assert match is not None, out.getvalue()
    sent, rejected, elapsed, _ = match.groups()
    assert (sent, rejected) == ("40", "0")
    assert 0 < float(elapsed) <= took + 0.05
    assert err.getvalue() == ""  # not a terminal: the summary alone


def test_produce_command__ctrl_c__summary_of_what_was_sent_exit_130(
    http_broker: FakeServer, workers_logger: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    http_broker.default("POST", "/jobs", Reply(201, {"id": "x"}))
    real = producer.produce

    def interrupted_after_a_while(*args, **kwargs):
        calls = [0]

        def ctrl_c(done: int) -> None:  # the main thread's join loop, as Ctrl-C would find it
            calls[0] += 1
            if calls[0] == 2:
                raise KeyboardInterrupt

        kwargs["progress"] = ctrl_c
        kwargs["progress_every_s"] = 0.01
        return real(*args, **kwargs)

    monkeypatch.setattr(producer, "produce", interrupted_after_a_while)
    out = io.StringIO()

    with pytest.raises(CommandError) as caught:
        call_command(produce.Command(), "--broker", http_broker.url, "-n", "100000", stdout=out)

    assert caught.value.returncode == 130
    line = out.getvalue().rstrip("\n")
    assert re.match(
        r"^interrupted: sent (\d+), rejected 0 in \d+\.\d s \(\d+\.\d tasks/s\); "
        r"\d+ of 100000 tasks not sent$",
        line,
    ), line

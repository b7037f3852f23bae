"""BrokerClient against a tiny local HTTP server shaped like the API."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.worker_fakes import FakeServer, Reply, delivery, serve, start_server, wait_until
from workers.client import BrokerClient, BrokerError, BrokerUnavailableError

MakeClient = Callable[..., BrokerClient]
IDLE = Reply(204)


def claim_in_thread(client: BrokerClient, out: dict[str, Any], **kwargs: Any) -> threading.Thread:
    """Run client.claim in a thread named "claimer"; the result lands in out["delivery"]."""

    def run() -> None:
        out["delivery"] = client.claim(kwargs.get("wait_ms", 20000), kwargs.get("lease_ms", 30000))
        out["returned_at"] = time.monotonic()

    thread = threading.Thread(target=run, name="claimer", daemon=True)
    thread.start()
    return thread


def test_client__claim_503_then_200__retries_and_returns_delivery(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    given = delivery("t1", {"line": "hi"})
    http_broker.script("GET", "/jobs/next", Reply(503, {"error": "down"}), Reply(200, given))
    client = make_client(http_broker.url)

    assert client.claim(1000, 30000) == given
    assert len(http_broker.requests_to("GET", "/jobs/next")) == 2


def test_client__claim_204__returns_none(http_broker: FakeServer, make_client: MakeClient) -> None:
    http_broker.script("GET", "/jobs/next", IDLE)
    client = make_client(http_broker.url)

    assert client.claim(0, 30000) is None


def test_client__claim__sends_wait_lease_and_queues(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("GET", "/jobs/next", IDLE)
    client = make_client(http_broker.url)

    client.claim(1500, 2500, ["a", "b"])

    (seen,) = http_broker.requests_to("GET", "/jobs/next")
    assert seen.query == {"wait_ms": ["1500"], "lease_ms": ["2500"], "queue": ["a,b"]}


@pytest.mark.parametrize(
    ("absent", "part"),
    [
        pytest.param("queue", "query", id="no_queues__no_queue_parameter"),
        pytest.param("authorization", "headers", id="no_token__no_authorization_header"),
    ],
)
def test_client__claim_without_queues_or_token__sends_neither(
    http_broker: FakeServer, make_client: MakeClient, absent: str, part: str
) -> None:
    http_broker.script("GET", "/jobs/next", IDLE)
    client = make_client(http_broker.url)

    client.claim(0, 1000)

    (seen,) = http_broker.seen
    assert absent not in getattr(seen, part)


def test_client__claim_401__raises_broker_error(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("GET", "/jobs/next", Reply(401, {"error": "Bad token."}))
    client = make_client(http_broker.url)

    with pytest.raises(BrokerError) as caught:
        client.claim(0, 1000)
    assert (caught.value.status, caught.value.message) == (401, "Bad token.")


def test_client__token__bearer_header_on_every_request(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.default("GET", "/jobs/next", IDLE)
    http_broker.default("GET", "/stats", Reply(200, {"ready": 0}))
    client = make_client(http_broker.url, token="s3cret")

    client.claim(0, 1000)
    client.stats()

    assert [s.headers.get("authorization") for s in http_broker.seen] == ["Bearer s3cret"] * 2


def test_client__identity_header__host_pid_and_calling_thread(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.default("GET", "/jobs/next", IDLE)
    client = make_client(http_broker.url)
    out: dict[str, Any] = {}

    claim_in_thread(client, out, wait_ms=0).join(5)
    client.claim(0, 1000)

    expected = [
        f"{socket.gethostname()}:{os.getpid()}:claimer",
        f"{socket.gethostname()}:{os.getpid()}:{threading.current_thread().name}",
    ]
    assert [s.headers["x-broker-worker"] for s in http_broker.seen] == expected


def test_client__several_calls__one_connection_reused(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.default("GET", "/jobs/next", IDLE)
    client = make_client(http_broker.url)

    for _ in range(5):
        client.claim(0, 1000)

    assert len({s.client_port for s in http_broker.seen}) == 1


def test_client__ack__lease_in_query_result_in_body(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("POST", "/jobs/t%2F1/ack", Reply(204))
    client = make_client(http_broker.url)

    assert client.ack("t/1", "l 1", {"n": 1}) is True

    (seen,) = http_broker.requests_to("POST", "/jobs/t%2F1/ack")
    assert (seen.query, seen.body) == ({"lease_id": ["l 1"]}, {"result": {"n": 1}})


def test_client__nack__error_in_body(http_broker: FakeServer, make_client: MakeClient) -> None:
    http_broker.script("POST", "/jobs/t1/nack", Reply(204))
    client = make_client(http_broker.url)

    assert client.nack("t1", "l1", "boom") is True

    (seen,) = http_broker.requests_to("POST", "/jobs/t1/nack")
    assert (seen.query, seen.body) == ({"lease_id": ["l1"]}, {"error": "boom"})


@pytest.mark.parametrize("verb", ["ack", "nack"])
@pytest.mark.parametrize("status", [404, 409])
def test_client__ack_or_nack_refused__final_answer_no_retry(
    http_broker: FakeServer, make_client: MakeClient, verb: str, status: int
) -> None:
    http_broker.default("POST", f"/jobs/t1/{verb}", Reply(status, {"error": "No."}))
    client = make_client(http_broker.url)

    answered = client.ack("t1", "l1") if verb == "ack" else client.nack("t1", "l1", "e")

    assert answered is False
    assert len(http_broker.requests_to("POST", f"/jobs/t1/{verb}")) == 1


def test_client__ack_503_then_204__retried_until_accepted(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("POST", "/jobs/t1/ack", Reply(503), Reply(502), Reply(204))
    client = make_client(http_broker.url)

    assert client.ack("t1", "l1") is True
    assert len(http_broker.requests_to("POST", "/jobs/t1/ack")) == 3


def test_client__ack_502_past_lease__gives_up_at_lease_end(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("GET", "/jobs/next", Reply(200, delivery("t1", None)))
    http_broker.default("POST", "/jobs/t1/ack", Reply(502))  # a proxy's, not the broker's 503
    client = make_client(http_broker.url, give_up_s=60.0, outage_grace_s=60.0)
    client.claim(0, 400)  # the lease, not give_up_s, bounds the retries
    started = time.monotonic()

    assert client.ack("t1", "lease-t1") is False
    assert 0.2 < time.monotonic() - started < 2.0
    assert len(http_broker.requests_to("POST", "/jobs/t1/ack")) > 2


def _handed_out_late(http_broker: FakeServer, after_s: float, lease_ms: int) -> None:
    """A long-poll claim answered after_s after it was sent, its lease starting then: the
    deadline says so (the broker's wall clock, here the same as ours)."""

    def answer(seen: Any) -> Reply | None:
        if seen.path != "/jobs/next":
            return None
        time.sleep(after_s)
        got = delivery("t1", None)
        got["deadline"] = (datetime.now(UTC) + timedelta(milliseconds=lease_ms)).isoformat()
        return Reply(200, got)

    http_broker.responder = answer


@pytest.mark.parametrize(
    ("verb", "path", "ok"),
    [
        ("ack", "/jobs/t1/ack", Reply(204)),
        ("extend", "/jobs/t1/extend", Reply(200, {"deadline": "2026-01-01T00:00:00.000Z"})),
    ],
)
def test_client__long_poll_lease_starts_late__one_503_past_send_plus_lease__retried(
    http_broker: FakeServer, make_client: MakeClient, verb: str, path: str, ok: Reply
) -> None:
    # Claim waits, the task turns up 0.8 s in, lease 1 s: the lease ends 1.8 s after the send.
    _handed_out_late(http_broker, 0.8, 1000)
    http_broker.script("POST", path, Reply(503), ok)
    client = make_client(http_broker.url, backoff_base_s=0.2, backoff_cap_s=0.2)
    sent = time.monotonic()
    assert client.claim(5000, 1000) is not None
    time.sleep(max(0.0, sent + 1.15 - time.monotonic()))  # past "sent + lease", inside the lease

    done = client.ack("t1", "lease-t1") if verb == "ack" else client.extend("t1", "lease-t1", 1000)

    assert done is True
    assert len(http_broker.requests_to("POST", path)) == 2


def test_client__extend__sends_lease_ms(http_broker: FakeServer, make_client: MakeClient) -> None:
    http_broker.script("POST", "/jobs/t1/extend", Reply(200, {"deadline": "x"}))
    client = make_client(http_broker.url)

    assert client.extend("t1", "l1", 5000) is True

    (seen,) = http_broker.requests_to("POST", "/jobs/t1/extend")
    assert seen.query == {"lease_id": ["l1"], "lease_ms": ["5000"]}


def test_client__extend_409__false(http_broker: FakeServer, make_client: MakeClient) -> None:
    http_broker.script("POST", "/jobs/t1/extend", Reply(409, {"error": "Other lease."}))
    client = make_client(http_broker.url)

    assert client.extend("t1", "l1", 5000) is False


def test_client__progress__report_as_body_lease_ms_in_query(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.default("POST", "/jobs/t1/progress", Reply(200, {"deadline": "x"}))
    client = make_client(http_broker.url)

    assert client.progress("t1", "l1", {"fraction": 0.5, "checkpoint": [1]}, 5000) is True
    assert client.progress("t1", "l1", {"message": "m"}) is True

    first, second = http_broker.requests_to("POST", "/jobs/t1/progress")
    assert (first.query, first.body) == (
        {"lease_id": ["l1"], "lease_ms": ["5000"]}, {"fraction": 0.5, "checkpoint": [1]},
    )  # fmt: skip
    assert (second.query, second.body) == ({"lease_id": ["l1"]}, {"message": "m"})


@pytest.mark.parametrize("status", [404, 409])
def test_client__progress_lease_lost__false(
    http_broker: FakeServer, make_client: MakeClient, status: int
) -> None:
    http_broker.script("POST", "/jobs/t1/progress", Reply(status, {"error": "No."}))
    assert make_client(http_broker.url).progress("t1", "l1", {"fraction": 1}, 5000) is False


def test_client__progress_refused__lease_still_extended(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("POST", "/jobs/t1/progress", Reply(400, {"error": "Invalid message."}))
    http_broker.script("POST", "/jobs/t1/extend", Reply(200, {"deadline": "x"}))
    client = make_client(http_broker.url)

    assert client.progress("t1", "l1", {"message": "m"}, 5000) is True

    (extend,) = http_broker.requests_to("POST", "/jobs/t1/extend")
    assert extend.query == {"lease_id": ["l1"], "lease_ms": ["5000"]}


def test_client__enqueue__status_and_json(http_broker: FakeServer, make_client: MakeClient) -> None:
    http_broker.script("POST", "/jobs", Reply(201, {"id": "t9"}))
    client = make_client(http_broker.url)

    assert client.enqueue({"payload": 1, "idempotency_key": "k1"}) == (201, {"id": "t9"})
    (seen,) = http_broker.requests_to("POST", "/jobs")
    assert seen.body == {"payload": 1, "idempotency_key": "k1"}  # a key given is sent as is


def test_client__enqueue_with_a_task_key__sent_as_is_beside_an_idempotency_key(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("POST", "/jobs", Reply(201, {"id": "t9"}))
    http_broker.script("POST", "/jobs/batch", Reply(201, {"ids": ["t10", "t11"]}))
    client = make_client(http_broker.url)

    client.enqueue({"payload": 1, "key": "tenant-acme"})
    client.enqueue_many([{"payload": 2, "key": "tenant-acme"}, {"payload": 3, "key": None}])

    (one,) = http_broker.requests_to("POST", "/jobs")
    (batch,) = http_broker.requests_to("POST", "/jobs/batch")
    bodies = [one.body, *batch.body["jobs"]]
    assert [b["key"] for b in bodies] == ["tenant-acme", "tenant-acme", None]
    # The task's key groups tasks; the idempotency key, one per task, makes retries harmless.
    assert len({b["idempotency_key"] for b in bodies}) == 3


def test_client__enqueue_unique__sent_as_is__holder_answer_returned(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    held = {"id": "t9", "deduplicated": True, "replaced": True}
    http_broker.script("POST", "/jobs", Reply(200, held))
    client = make_client(http_broker.url)
    unique = {"key": "doc-42", "on_conflict": "replace", "debounce_ms": 2000}

    assert client.enqueue({"payload": 1, "unique": unique}) == (200, held)
    (seen,) = http_broker.requests_to("POST", "/jobs")
    assert seen.body["unique"] == unique


@pytest.mark.parametrize("given", [{}, {"idempotency_key": None}])
def test_client__enqueue_503_then_200__retried_under_one_key_of_its_own(
    http_broker: FakeServer, make_client: MakeClient, given: dict[str, Any]
) -> None:
    # The 503 hid a commit (the database went away as it answered): the retry finds the key.
    http_broker.script("POST", "/jobs", Reply(503), Reply(200, {"id": "t9"}))
    client = make_client(http_broker.url)

    assert client.enqueue({"payload": 1, **given}) == (200, {"id": "t9"})
    first, second = (s.body for s in http_broker.requests_to("POST", "/jobs"))
    assert first == second
    assert first["payload"] == 1 and len(first["idempotency_key"]) == 32
    client.enqueue({"payload": 1})
    assert (
        http_broker.requests_to("POST", "/jobs")[2].body["idempotency_key"]
        != first["idempotency_key"]
    )


def test_client__enqueue_400__returned_not_retried(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("POST", "/jobs", Reply(400, {"error": "Bad.", "fields": {}}))
    client = make_client(http_broker.url)

    assert client.enqueue({"payload": 1}) == (400, {"error": "Bad.", "fields": {}})
    assert len(http_broker.requests_to("POST", "/jobs")) == 1


def test_client__stats_always_503__raises_unavailable(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.default("GET", "/stats", Reply(503))
    client = make_client(http_broker.url, give_up_s=0.3)

    with pytest.raises(BrokerUnavailableError):
        client.stats()


def test_client__broker_down_then_up__claim_retries_until_reachable(
    make_client: MakeClient,
) -> None:
    server, fake = start_server(bind_only=True)  # bound, not listening: connection refused
    fake.script("GET", "/jobs/next", Reply(200, delivery("t1", 7)))
    client = make_client(fake.url)
    out: dict[str, Any] = {}
    try:
        thread = claim_in_thread(client, out, wait_ms=0)
        time.sleep(0.3)
        assert thread.is_alive()  # still retrying
        server.server_activate()
        loop = serve(server)
        thread.join(5)
        assert out["delivery"]["task"]["id"] == "t1"
    finally:
        server.shutdown()
        loop.join()
        server.server_close()


def test_client__broker_unreachable__retry_warning_names_url_and_error(
    make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    server, _fake = start_server(bind_only=True)  # bound, not listening: connection refused
    port = server.server_address[1]
    client = make_client(f"http://user:secret@127.0.0.1:{port}")
    out: dict[str, Any] = {}
    try:
        with caplog.at_level("WARNING", logger="workers.client"):
            thread = claim_in_thread(client, out, wait_ms=0)
            assert wait_until(lambda: caplog.records, 5)
            client.cancel_claims()
            thread.join(5)
    finally:
        server.server_close()
    message = caplog.records[0].getMessage()
    assert message.startswith(
        f"broker at http://127.0.0.1:{port} unreachable (ConnectionRefusedError: [Errno 111] "
        "Connection refused) on GET /jobs/next?wait_ms=0&lease_ms=30000; retry in "
    )
    assert "secret" not in message  # a password in the URL is not logged


def test_client__cancel_claims__parked_claim_returns_at_once(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("GET", "/jobs/next", Reply(204, hold_s=20))
    http_broker.default("POST", "/jobs/t1/ack", Reply(204))
    client = make_client(http_broker.url)
    out: dict[str, Any] = {}
    thread = claim_in_thread(client, out)
    assert wait_until(lambda: len(http_broker.seen) == 1)
    time.sleep(0.1)  # let the claim park in recv()

    cancelled_at = time.monotonic()
    client.cancel_claims()
    thread.join(5)

    assert out["delivery"] is None
    assert out["returned_at"] - cancelled_at < 1.0
    assert client.claim(20000, 30000) is None  # later claims do not even go out
    assert len(http_broker.requests_to("GET", "/jobs/next")) == 1


def test_client__cancel_claims__acks_still_go_through(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.default("POST", "/jobs/t1/ack", Reply(204))
    client = make_client(http_broker.url)
    client.cancel_claims()

    assert client.ack("t1", "l1") is True


def test_client__extend__moves_the_ack_retry_window(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("GET", "/jobs/next", Reply(200, delivery("t1", None)))
    http_broker.script("POST", "/jobs/t1/extend", Reply(200, {"deadline": "x"}))
    http_broker.default("POST", "/jobs/t1/ack", Reply(502))  # a 503 would push past the lease
    client = make_client(http_broker.url, give_up_s=60.0)
    client.claim(0, 100)
    client.extend("t1", "lease-t1", 1000)
    started = time.monotonic()

    assert client.ack("t1", "lease-t1") is False
    assert 0.7 < time.monotonic() - started < 2.0


def test_client__submit_workflow__posts_name_and_steps(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    answer = {"id": "7", "tasks": {"a": "1", "b": "2"}}
    http_broker.script("POST", "/workflows", Reply(503), Reply(201, answer))
    steps = [{"ref": "a", "job": {"payload": 1}}, {"ref": "b", "job": {"payload": 2},
                                                   "after": ["a"]}]  # fmt: skip

    assert make_client(http_broker.url).submit_workflow("etl", steps) == (201, answer)
    assert http_broker.requests_to("POST", "/workflows")[-1].body == {"name": "etl", "steps": steps}


@pytest.mark.parametrize("prefix", ["/queue", "/queue/", "/apps/queue"])
def test_client__broker_under_a_path_prefix__every_call_goes_under_it(
    http_broker: FakeServer, make_client: MakeClient, prefix: str
) -> None:
    # A broker inside a Django project of yours: path("queue/", include("broker.urls")).
    under = prefix.rstrip("/")
    http_broker.script("GET", f"{under}/jobs/next", Reply(200, delivery("t1", {})))
    http_broker.script("POST", f"{under}/jobs/t1/ack", Reply(204))
    http_broker.script("POST", f"{under}/jobs", Reply(201, {"id": "2"}))
    http_broker.script("PUT", f"{under}/types/resize", Reply(201, {"name": "resize"}))
    client = make_client(http_broker.url + prefix)

    assert client.claim(0, 30000)["task"]["id"] == "t1"
    assert client.ack("t1", "lease-1") is True
    assert client.enqueue({"payload": {}}) == (201, {"id": "2"})
    assert client.put_type("resize", {"schema": None})[0] == 201
    assert [s.path for s in http_broker.seen] == [
        f"{under}/jobs/next", f"{under}/jobs/t1/ack", f"{under}/jobs", f"{under}/types/resize",
    ]  # fmt: skip

"""BrokerClient's settle-and-claim, settles and transport against the fake HTTP broker."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.api_fake import ApiFake
from tests.worker_fakes import FakeServer, Reply, delivery
from workers.client import BrokerClient, BrokerError, ResultRefusedError

MakeClient = Callable[..., BrokerClient]


def test_settle_and_claim__settles_and_claim_in_one_body__statuses_and_deliveries(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    got = [delivery("t3", {"n": 3})]
    results = [{"id": "t1", "status": 204}, {"id": "t2", "status": 409, "error": "No."}]
    http_broker.script("POST", "/jobs/claim", Reply(200, {"results": results, "deliveries": got}))
    client = make_client(http_broker.url)

    claimed = client.settle_and_claim(
        [("t1", "l1", {"ok": True})], [("t2", "l2", "x" * 9000)], 5, 500, 2000, ["a"]
    )

    assert claimed == ([204, 409], got)
    (seen,) = http_broker.requests_to("POST", "/jobs/claim")
    assert seen.body == {
        "max": 5, "wait_ms": 500, "lease_ms": 2000, "queues": ["a"],
        "acks": [{"id": "t1", "lease_id": "l1", "result": {"ok": True}}],
        "nacks": [{"id": "t2", "lease_id": "l2", "error": "x" * 8000}],
    }  # fmt: skip


def test_settle_and_claim__nothing_to_settle__a_plain_claim(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("POST", "/jobs/claim", Reply(204))

    assert make_client(http_broker.url).settle_and_claim([], [], 3, 0, 1000) == ([], [])
    assert http_broker.requests_to("POST", "/jobs/claim")[0].body == {
        "max": 3, "wait_ms": 0, "lease_ms": 1000,
    }  # fmt: skip


def test_settle_and_claim__body_over_the_limit__settled_apart_culprit_413(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.max_body = 2000
    api = ApiFake(http_broker)
    api.add("t1", None)
    api.add("t2", None)
    client = make_client(http_broker.url)
    client.claim_many(2, 0, 30000)

    claimed = client.settle_and_claim(
        [("t1", "lease-t1", "small"), ("t2", "lease-t2", "x" * 2100)], [], 2, 0, 30000
    )

    assert claimed == ([204, 413], [])
    assert api.acked == {"t1": "small"}
    assert "t2" in api.held  # still held: its worker nacks it next


def test_settle_and_claim__broker_without_it__settled_by_the_batch_calls(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    unknown = {"error": "Unknown field.", "fields": {"acks": ["Unknown field."]}}
    http_broker.script("POST", "/jobs/claim", Reply(400, unknown))
    http_broker.script("POST", "/jobs/ack", Reply(200, {"results": [{"id": "t1", "status": 204}]}))

    claimed = make_client(http_broker.url).settle_and_claim([("t1", "l1", None)], [], 5, 0, 1000)

    assert claimed == ([204], [])
    assert http_broker.requests_to("POST", "/jobs/ack")[0].body == {
        "acks": [{"id": "t1", "lease_id": "l1", "result": None}]
    }


def test_settle_and_claim__claim_refused__raises_with_what_became_of_the_settles(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.default("POST", "/jobs/claim", Reply(401, {"error": "Bad token."}))
    http_broker.default("POST", "/jobs/nack", Reply(401, {"error": "Bad token."}))

    with pytest.raises(BrokerError) as caught:
        make_client(http_broker.url).settle_and_claim([], [("t1", "l1", "e")], 5, 0, 1000)

    assert (caught.value.status, caught.value.settled) == (401, [401])


def test_settle_and_claim__carrying_settles__not_cut_by_cancel_claims(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    answer = {"results": [{"id": "t1", "status": 204}], "deliveries": []}
    http_broker.script("POST", "/jobs/claim", Reply(200, answer, hold_s=0.5))
    client = make_client(http_broker.url)
    out: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: out.update(c=client.settle_and_claim([("t1", "l1", None)], [], 5, 500, 1000))
    )
    thread.start()
    time.sleep(0.15)

    client.cancel_claims()
    thread.join(5)

    assert out["c"] == ([204], [])  # its settles' fate is known, not cut off


def test_settle__ack_503_then_statuses__retried_then_per_item(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    results = [{"id": "t1", "status": 204}, {"id": "t2", "status": 404}]
    http_broker.script("POST", "/jobs/ack", Reply(503), Reply(200, {"results": results}))
    http_broker.script("POST", "/jobs/nack", Reply(200, {"results": [{"id": "t3", "status": 204}]}))

    statuses = make_client(http_broker.url).settle(
        [("t1", "l1", None), ("t2", "l2", 7)], [("t3", "l3", "boom")]
    )

    assert statuses == [204, 404, 204]


def test_ack__413__raises_result_refused(http_broker: FakeServer, make_client: MakeClient) -> None:
    http_broker.script("POST", "/jobs/t1/ack", Reply(413, {"error": "Too large."}))

    with pytest.raises(ResultRefusedError) as caught:
        make_client(http_broker.url).ack("t1", "l1", "x")

    assert (caught.value.status, caught.value.message) == (413, "Too large.")


def test_client__broker_closed_idle_connection__reconnects_without_a_retry(
    http_broker: FakeServer, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    http_broker.script("GET", "/stats", Reply(200, {"ready": 0}, close=True), Reply(200, {}))
    client = make_client(http_broker.url)

    with caplog.at_level(logging.WARNING, logger="workers"):
        client.stats()
        time.sleep(0.1)  # the hang-up reaches us while idle
        client.stats()

    assert caplog.text == ""
    assert len(http_broker.requests_to("GET", "/stats")) == 2
    assert len({s.client_port for s in http_broker.seen}) == 2


def test_client__base_url_with_a_path__requests_under_it(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    http_broker.script("GET", "/broker/stats", Reply(200, {"ready": 1}))

    assert make_client(f"{http_broker.url}/broker/").stats() == {"ready": 1}


@pytest.mark.parametrize("url", ["localhost:8080", "ftp://host", "http://"])
def test_client__not_an_http_url__value_error(url: str) -> None:
    with pytest.raises(ValueError, match="http"):
        BrokerClient(url)

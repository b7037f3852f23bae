"""BrokerClient while the broker's database is away: settles and extends answered 503 are
retried past their lease (the sweeper holds leases that ran out in an outage), and a settle's 503
is waited for."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.worker_fakes import FakeServer, Reply, delivery
from workers.client import BrokerClient

MakeClient = Callable[..., BrokerClient]


SETTLE_CALLS: dict[str, tuple[str, Callable[[BrokerClient], Any], Reply]] = {
    "ack": ("/jobs/t1/ack", lambda c: c.ack("t1", "lease-t1"), Reply(204)),
    "nack": ("/jobs/t1/nack", lambda c: c.nack("t1", "lease-t1", "boom"), Reply(204)),
    "extend": (
        "/jobs/t1/extend",
        lambda c: c.extend("t1", "lease-t1", 1000),
        Reply(200, {"deadline": "2026-01-01T00:00:00.000Z"}),
    ),
    "progress": (
        "/jobs/t1/progress",
        lambda c: c.progress("t1", "lease-t1", {"fraction": 0.5}, 1000),
        Reply(200, {"deadline": "2026-01-01T00:00:00.000Z"}),
    ),
    "batch ack": (
        "/jobs/ack",
        lambda c: c.settle([("t1", "lease-t1", None)], []) == [204],
        Reply(200, {"results": [{"id": "t1", "status": 204}]}),
    ),
    "settle and claim": (
        "/jobs/claim",
        lambda c: c.settle_and_claim([("t1", "lease-t1", None)], [], 1, 0, 1000).statuses == [204],
        Reply(200, {"results": [{"id": "t1", "status": 204}], "deliveries": []}),
    ),
}


def _database_away_for(
    http_broker: FakeServer, path: str, seconds: float, then: Reply
) -> list[float]:
    """path answers the broker's 503 for `seconds` (its database away: no lease is reclaimed
    then, and those that ended meanwhile are held after it), then `then`, then 502s. Returns
    the list it fills with the times (time.monotonic()) of the 503s it answered."""
    back_at = time.monotonic() + seconds
    unavailable: list[float] = []

    def answer(seen: Any) -> Reply | None:
        if seen.path != path:
            return None
        if time.monotonic() < back_at:
            unavailable.append(time.monotonic())
            return Reply(503, {"error": "The database cannot be reached; try again shortly."})
        return then

    http_broker.responder = answer
    return unavailable


@pytest.mark.parametrize("call", SETTLE_CALLS)
def test_client__503_past_lease__retried_through_the_outage_until_taken(
    http_broker: FakeServer, make_client: MakeClient, call: str
) -> None:
    path, settle, ok = SETTLE_CALLS[call]
    http_broker.script("GET", "/jobs/next", Reply(200, delivery("t1", None)))
    client = make_client(http_broker.url, outage_grace_s=0.5)
    client.claim(0, 300)
    _database_away_for(http_broker, path, 1.0, ok)  # the lease ends 0.3 s into the outage

    assert settle(client)
    assert len(http_broker.requests_to("POST", path)) > 3


@pytest.mark.parametrize("call", ["ack", "extend", "batch ack"])
def test_client__503_then_no_answer__gives_up_outage_grace_after_the_last_503(
    http_broker: FakeServer, make_client: MakeClient, call: str
) -> None:
    path, settle, _ = SETTLE_CALLS[call]
    http_broker.script("GET", "/jobs/next", Reply(200, delivery("t1", None)))
    client = make_client(http_broker.url, outage_grace_s=0.6)
    client.claim(0, 200)
    started = time.monotonic()
    unavailable = _database_away_for(http_broker, path, 0.4, Reply(502))  # then it is gone

    assert not settle(client)
    gave_up = time.monotonic()
    # 0.6 s after the last 503 (which came up to 0.4 s in, by the retries' backoff), not at
    # the end of the 0.2 s lease.
    assert unavailable
    assert gave_up - unavailable[-1] >= 0.6
    assert gave_up - started < 2.0


def test_client__settle_and_claim__waits_for_the_settles_beyond_wait_plus_margin(
    http_broker: FakeServer, make_client: MakeClient
) -> None:
    # The broker's 503 for a settle comes after its pool timeout (its database away), longer
    # than wait + margin: the client must hear it, not time out (no 503, no outage grace).
    results = {"results": [{"id": "t1", "status": 204}], "deliveries": []}
    http_broker.script("POST", "/jobs/claim", Reply(200, results, hold_s=0.6))
    client = make_client(http_broker.url, claim_margin_s=0.2, read_timeout_s=1.0)

    claimed = client.settle_and_claim([("t1", "lease-t1", None)], [], 1, 0, 1000)

    assert claimed.statuses == [204]
    assert len(http_broker.requests_to("POST", "/jobs/claim")) == 1

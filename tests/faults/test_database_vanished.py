"""The primary's host vanishes (a power cut, a network partition): no FIN, no RST, its packets
just stop. A multi-host DATABASE_URL names a second server (here the same PostgreSQL, as a
promoted standby would be). The broker's connections to the vanished host must be given up in
seconds, not after the kernel's TCP retransmission timeout (15 minutes), or a failover of that
kind stops every write of the node for that long."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.faults.harness import Broker, Claim, Enqueuers, held
from tests.faults.vanishing import VanishingHost, can_vanish
from tests.procs import http, needs, sweeping, wait_until

# serial: latency bounds
pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow, pytest.mark.serial]
log = logging.getLogger(__name__)
# What the broker's defaults allow for noticing a dead host (10 s without an acknowledgement,
# tcp_user_timeout; keepalives for connections that wait to read), then one connect_timeout (2 s)
# on the vanished host before the next: writes are back well within this.
WRITES_BACK_S = 20


def _ack_as_a_worker(base: str, task_id: str, lease_id: str) -> tuple[int, Any]:
    """An ack, sent again while the broker answers 503, as runworker sends it after an outage.
    A request given a pooled connection to the vanished host before its process knew waits
    for that connection's timeout (10 s), then answers 503."""
    end = time.monotonic() + 60
    while True:
        answer = http("POST", f"{base}/jobs/{task_id}/ack?lease_id={lease_id}", timeout=30)
        if answer[0] != 503 or time.monotonic() > end:
            return answer
        time.sleep(0.2)


def _enqueue_as_a_producer(base: str, queue: str) -> float:
    """POST /jobs, sent again while the broker answers 503 (a gunicorn worker that had sent
    nothing to the host renews its pool at its next request, which waits up to
    BROKER_DB_POOL_TIMEOUT); when the request that was accepted was sent."""
    end = time.monotonic() + 15
    while True:
        sent = time.monotonic()
        status, body = http("POST", f"{base}/jobs", {"payload": {}, "queue": queue})
        if status == 201:
            return sent
        assert status == 503 and time.monotonic() < end, (status, body)
        time.sleep(0.2)


def test_primary_host_vanishes__writes_back_on_the_next_host_in_seconds__nothing_lost(
    db_url: str, tmp_path: Path
) -> None:
    reason = can_vanish()
    needs(reason is None, reason or "")
    s = connection.settings_dict
    pg_host, pg_port = s["HOST"] or "127.0.0.1", int(s["PORT"] or 5432)
    with VanishingHost(pg_host, pg_port, tmp_path / "forwarder.log") as primary:
        url = (
            f"postgresql://{s['USER']}@{primary.host}:5432,{pg_host}:{pg_port}/{s['NAME']}"
            "?target_session_attrs=read-write&connect_timeout=2"
        )
        broker = Broker(url, tmp_path, workers=2, BROKER_DB_POOL_TIMEOUT="2")
        broker.start()
        with sweeping(url, tmp_path, interval_ms=100) as sweep:
            try:
                base = broker.base
                woken = Claim(base, "woken", 60_000)
                time.sleep(0.5)  # parked, the listener connected (to the first host)
                # One producer: one request at a time, so one gunicorn worker sends nothing to
                # the vanished host for the first 10 s and learns it from its sibling.
                with Enqueuers(base, threads=1) as enqueuers:
                    wait_until(lambda: enqueuers.first_write_after(0), 10, 0.02, "a first 201")
                    # A lease that runs out while the host is gone; its worker acks after.
                    task_id, lease_id = held(base, "lapsing")
                    primary.vanish()
                    gone = time.monotonic()
                    wait_until(
                        lambda: enqueuers.first_write_after(gone, sent=True), WRITES_BACK_S, 0.05,
                        "a 201 for a request sent after the host vanished",
                    )  # fmt: skip
                    # The sweeper lost the host too, and back on the next it holds the leases
                    # that ran out meanwhile: the late ack is taken, the task does not run twice.
                    wait_until(lambda: "database back after" in sweep.output(), 30, 0.05, "sweeper")
                    ack = _ack_as_a_worker(base, task_id, lease_id)
                    acked = time.monotonic()
                wait_until(
                    lambda: http("GET", f"{base}/healthz")[0] == 200, 15, 0.1, "/healthz 200"
                )
                # The listener found the next host too (only the parked claim's process has one;
                # either process answers /healthz): a claim parked through it wakes at once.
                # An enqueue before that is heard by no one: the reconnection wakes every claim.
                wait_until(lambda: "listener reconnected" in broker.output(), 15, 0.05,
                           "the wake-up listener on the next host")  # fmt: skip
                sent = _enqueue_as_a_producer(base, "woken")
                woken.join(30)
                accepted = [key for *_, status, key in enqueuers.answers if status in (200, 201)]
                missing = []
                for key in accepted:
                    status, _ = http(
                        "POST", f"{base}/jobs",
                        {"payload": {}, "queue": "probe", "idempotency_key": key},
                    )  # fmt: skip
                    if status != 200:  # 200: the key's task exists; 201 made it now
                        missing.append((key, status))
            finally:
                broker.stop()

    first_write = enqueuers.first_write_after(gone, sent=True)
    assert first_write is not None
    log.info(
        "host vanished: first write %.1f s after, late ack %.1f s after, parked claim woken %.1f ms"
        " after an enqueue", first_write - gone, acked - gone, (woken.answered_at - sent) * 1000,
    )  # fmt: skip
    assert woken.status == 200, woken.body
    assert woken.answered_at - sent < 1.0, woken.answered_at - sent
    # Every request was answered (none hung until the client's 30 s timeout): 201, or 503 JSON
    # while the broker had no server.
    statuses = {status for _, _, status, _ in enqueuers.answers}
    assert statuses <= {201, 503}, statuses
    assert not missing, missing
    assert ack == (204, None), ack

"""PostgreSQL cut off from the broker's processes for a few seconds (a TCP proxy between them,
so the PostgreSQL other test runs share is untouched): every process is back within a second of
the database, and parked claims wait the outage out quietly."""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from django.db import connection

from tests.faults.harness import Broker, Claim, Enqueuers, held
from tests.procs import http, running, sweeper, wait_until
from tests.proxy import proxy_to

# serial: latency bounds
pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow, pytest.mark.serial]
log = logging.getLogger(__name__)
OUTAGE_S = 3.5
GRACE_MS = 3000  # BROKER_OUTAGE_GRACE_MS for the test's sweeper


def _state(base: str, task_id: str) -> str | None:
    status, task = http("GET", f"{base}/jobs/{task_id}")
    return task["state"] if status == 200 else None


def test_database_outage__every_process_back_within_1s__parked_claims_wait_quietly(
    db_url: str, tmp_path: Path
) -> None:
    s = connection.settings_dict
    with proxy_to(s["HOST"] or "127.0.0.1", int(s["PORT"] or 5432)) as proxy, ExitStack() as stack:
        via = proxy.url(s["USER"], s["NAME"])
        # One process (its pool and its listener); a pool timeout shorter than the outage, as in
        # a failover that outlasts the default 8 s: requests then meet the outage as 503s.
        broker = Broker(via, tmp_path, workers=1, BROKER_DB_POOL_TIMEOUT="2")
        broker.start()
        stack.callback(broker.stop)
        sweep = stack.enter_context(
            running(sweeper(via, tmp_path, interval_ms=100, BROKER_OUTAGE_GRACE_MS=str(GRACE_MS)))
        )
        base = broker.base
        quiet = Claim(base, "quiet", int((OUTAGE_S + 2.5) * 1000))  # its wait ends after it
        late = Claim(base, "late", 1500)  # its wait ends in the outage
        woken = Claim(base, "woken", 30_000)
        promoted = Claim(base, "due", 30_000)
        time.sleep(0.5)  # all parked (the hub is listening)
        with Enqueuers(base, threads=3) as enqueuers:
            time.sleep(0.3)
            # Made just before the outage, so that however slow the host was until now: a task
            # due one second into it (only the sweeper, once back, can make it ready) and two
            # leases that run out in it (one's worker acks after it, one's never does).
            status, _ = http(
                "POST", f"{base}/jobs", {"payload": {}, "queue": "due", "delay_ms": 1000}
            )
            assert status == 201
            acked, lapsed = (held(base, queue) for queue in ("acked", "lapsed"))
            proxy.down()
            time.sleep(OUTAGE_S)
            proxy.up()
            back = time.monotonic()
            wait_until(
                lambda: enqueuers.first_write_after(back), 15, 0.02, "a 201 after the outage"
            )
            # The sweeper is back and has swept since (every 0.1 s): it holds both leases, or it
            # would have reclaimed them by now. The worker's late ack comes then, inside the grace
            # however long the claims below take to end.
            wait_until(lambda: "database back after" in sweep.output(), 15, 0.05, "the sweeper")
            time.sleep(0.5)
            ack = http("POST", f"{base}/jobs/{acked[0]}/ack?lease_id={acked[1]}")
        sent = time.monotonic()
        status, _ = http("POST", f"{base}/jobs", {"payload": {}, "queue": "woken"})
        assert status == 201
        for claim in (quiet, late, woken, promoted):
            claim.join(40)
        wait_until(lambda: _state(base, lapsed[0]) != "handed_out", GRACE_MS / 1000 + 5)
        reclaimed_at = time.monotonic()
        reclaimed = _state(base, lapsed[0])
        sweeper_log = sweep.output()

    first_write = enqueuers.first_write_after(back)
    assert first_write is not None
    log.info(
        "outage %.1f s: first write %.0f ms after the database was back, due task promoted and"
        " handed out after %.0f ms, parked claim woken %.1f ms after an enqueue was sent",
        OUTAGE_S, (first_write - back) * 1000, (promoted.answered_at - back) * 1000,
        (woken.answered_at - sent) * 1000,
    )  # fmt: skip
    during = {status for sent_at, _, status, _ in enqueuers.answers if sent_at < back}
    # Writes resume within a second of the database in the broker's process (its pool), the
    # sweeper promotes the due task and the hub wakes its parked claim within a second too.
    assert first_write - back < 1.0, first_write - back
    assert promoted.status == 200, promoted.body
    assert promoted.answered_at - back < 1.0, promoted.answered_at - back
    # The listener is back: a claim parked through the outage wakes at once for a new task.
    assert woken.status == 200, woken.body
    assert woken.answered_at - sent < 0.1, woken.answered_at - sent
    # Leases that ran out while the sweeper could not reach the database are held for the grace
    # after it is back: the worker's late ack is taken; a lease nobody settles is reclaimed then.
    assert ack == (204, None), ack
    assert reclaimed == "delayed"
    assert reclaimed_at - back > GRACE_MS / 1000 - 0.5, reclaimed_at - back
    assert "database back after" in sweeper_log
    # A claim whose wait ended after the outage answers as if nothing happened; one whose wait
    # ended inside it, 503 (the database is still away then), as JSON.
    assert (quiet.status, quiet.body) == (204, None)
    assert late.status == 503, late.body
    assert late.body["error"] == "The database cannot be reached; try again shortly."
    # Requests that came in the outage waited BROKER_DB_POOL_TIMEOUT for a connection: 503.
    assert during <= {201, 503}, during
    assert 503 in during


def test_sweeper_started_in_an_outage__back_within_a_second_of_the_database(
    db_url: str, tmp_path: Path
) -> None:
    s = connection.settings_dict
    with proxy_to(s["HOST"] or "127.0.0.1", int(s["PORT"] or 5432)) as proxy:
        proxy.down()
        with running(sweeper(proxy.url(s["USER"], s["NAME"]), tmp_path, interval_ms=100)) as sweep:
            wait_until(lambda: "error connecting" in sweep.output(), 60, 0.05, "a first attempt")
            # Past a default pool's retries 1 and 3 s after its first attempt; its next, at 7 s.
            time.sleep(3.5)
            proxy.up()
            back = time.monotonic()
            wait_until(lambda: "database back after" in sweep.output(), 15, 0.02, "the sweeper")
            took = time.monotonic() - back
    assert took < 1.0, took

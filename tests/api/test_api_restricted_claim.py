"""Claims from paused and limited queues (broker.queue.restricted), on either database."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from broker import queue, queues
from broker.queue import restricted, sql
from tests.api.conftest import ack_all

pytestmark = pytest.mark.django_db


def names(deliveries: list[dict]) -> list[str]:
    return [d["task"]["queue"] for d in deliveries]


def test_paused__claims_take_nothing_from_it_enqueue_still_works(put, take, set_queue) -> None:
    set_queue("mail", paused=True)
    put("mail", 2)
    assert take(["mail"]) == []
    assert take() == []
    assert take(["mail", "other"], n=5) == []


def test_paused__other_queues_still_served_in_claim_order(put, take, set_queue) -> None:
    put("mail", 3, priority="high")
    put("reports", 2)
    set_queue("mail", paused=True)
    assert names(take(n=10)) == ["reports", "reports"]
    set_queue("mail", paused=False)
    assert names(take(n=10)) == ["mail"] * 3


def test_paused_before_its_first_task__enqueue_waits_for_resume(api_client, put, take) -> None:
    queues.update("later", {"paused": True})
    put("later")
    assert take(["later"]) == []
    queues.update("later", {"paused": False})
    assert names(take(["later"])) == ["later"]


def test_max_in_flight__caps_handed_out_and_frees_on_ack(api_client, put, take, set_queue) -> None:
    set_queue("api", max_in_flight=2)
    put("api", 5)
    first = take(["api"], n=10)
    assert len(first) == 2
    assert take(["api"]) == [] and take() == []
    ack_all(api_client, first[:1])
    assert len(take(n=10)) == 1
    assert take() == []


def test_max_in_flight__nack_cancel_and_reclaim_free_slots_too(
    api_client, put, take, set_queue
) -> None:
    set_queue("api", max_in_flight=1)
    put("api", 4, max_attempts=5)
    (one,) = take(["api"])
    queue.nack(int(one["task"]["id"]), lease_id=one["lease_id"], error="boom")
    (two,) = take(["api"])
    queue.cancel(int(two["task"]["id"]))
    (three,) = take(["api"], n=3)
    assert take(["api"]) == []
    queue.extend(int(three["task"]["id"]), lease_id=three["lease_id"], lease_ms=1)
    import time

    time.sleep(0.01)
    assert queue.reclaim_expired() == 1
    assert len(take(["api"])) == 1


def test_max_in_flight__unlimited_queues_beside_it_still_fill_the_batch(
    put, take, set_queue
) -> None:
    put("api", 5, priority="high")
    put("bulk", 5)
    set_queue("api", max_in_flight=2)
    assert sorted(names(take(n=6))) == ["api", "api", "bulk", "bulk", "bulk", "bulk"]


def test_rate__bucket_holds_max_1_rate__then_one_per_token(
    monkeypatch: pytest.MonkeyPatch, put, take, set_queue
) -> None:
    set_queue("slow", rate_per_s=2)
    put("slow", 10)
    assert len(take(["slow"], n=10)) == 2  # capacity max(1, 2)
    assert take(["slow"]) == []
    row = queues.Queue.objects.get(name="slow")
    # Half a second later, one token more: move the bucket's last refill back by 0.5 s.
    queues.Queue.objects.filter(name="slow").update(
        refilled_at=row.refilled_at - timedelta(milliseconds=500)
    )
    assert len(take(["slow"], n=10)) == 1
    assert take(["slow"]) == []


def test_rate__below_one_per_second__one_token_at_most(put, take, set_queue) -> None:
    set_queue("rare", rate_per_s=0.1)
    put("rare", 3)
    assert len(take(["rare"], n=3)) == 1
    got = queue.claim(["rare"], 1000)
    assert got == [] and got.retry_in is not None and 9 < got.retry_in <= 10


def test_rate__a_claim_that_finds_nothing_ready_spends_no_token(put, take, set_queue) -> None:
    set_queue("slow", rate_per_s=1)
    assert take(["slow"]) == []
    put("slow")
    assert len(take(["slow"])) == 1


def test_restricted_scope__hint_forgotten_once_the_queue_is_plain_again(
    put, take, set_queue
) -> None:
    set_queue("mail", paused=True)
    assert take() == []
    assert restricted.seems_restricted(None)
    set_queue("mail", paused=False)
    put("mail")
    assert names(take()) == ["mail"]
    assert not restricted.seems_restricted(None)


def test_unrestricted__claim_is_the_one_statement(put, take, set_queue) -> None:
    from django.test.utils import CaptureQueriesContext

    set_queue("elsewhere", paused=True)
    put("plain")
    with CaptureQueriesContext(connection) as ctx:
        assert names(take(["plain"])) == ["plain"]
    claims = [q for q in ctx.captured_queries if "broker_task" in q["sql"]]
    assert len(claims) == 1 if connection.vendor == "postgresql" else len(claims) == 2


def test_restricted_hints__claims_of_ever_new_scopes__bounded(take, set_queue) -> None:
    set_queue("paused", paused=True)
    for i in range(restricted.MAX_HINTS * 3):
        queue.claim(["paused", f"x{i}"], 1000)
    assert 0 < len(restricted._hints) <= restricted.MAX_HINTS
    assert restricted.seems_restricted(["paused", f"x{restricted.MAX_HINTS * 3 - 1}"])


@pytest.mark.postgres
@pytest.mark.parametrize("scope", [["fair"], None])
def test_restricted_scope__nothing_ready__answers_without_locking_or_picking(
    put, take, set_queue, scope: list[str] | None
) -> None:
    # An idle fair queue (every SQS standard queue) holds parked polls: each one's look is one
    # probe, not the settings row's lock and a fair round (those wait for a task to exist).
    from django.test.utils import CaptureQueriesContext

    set_queue("fair", fair=True)
    with CaptureQueriesContext(connection) as ctx:
        assert take(scope) == []
    statements = [q["sql"] for q in ctx.captured_queries]
    locks = [s for s in statements if s.startswith(sql.LOCK_LIMITED.split(" FROM")[0])]
    picks = [s for s in statements if "broker_keystate" in s]
    assert not locks and not picks, statements
    put("fair")
    assert names(take(scope)) == ["fair"]

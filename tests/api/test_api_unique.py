"""Unique tasks, debounce and throttle (API.md "Unique tasks, debounce and throttle")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from broker import queue
from broker.models import Task
from tests.api.conftest import parse_time
from tests.conftest import post

pytestmark = pytest.mark.django_db


def job(key: str = "doc-42", payload: Any = None, **unique: Any) -> dict[str, Any]:
    return {
        "payload": payload if payload is not None else {"doc": 42},
        "unique": {"key": key, **unique},
    }


def totals(api_client) -> dict[str, int]:
    return api_client.get("/stats").json()["totals"]


def test_unique__second_enqueue__200_holder_nothing_created(api_client) -> None:
    first = post(api_client, "/jobs", job())
    again = post(api_client, "/jobs", job(payload={"doc": 43}))
    assert first.status_code == 201
    assert (again.status_code, again.json()) == (
        200,
        {"id": first.json()["id"], "deduplicated": True},
    )
    assert again["Location"] == f"/jobs/{first.json()['id']}"
    assert Task.objects.count() == 1
    assert (totals(api_client)["enqueued"], totals(api_client)["deduplicated"]) == (1, 1)
    shown = api_client.get(f"/jobs/{first.json()['id']}").json()
    assert (shown["unique_key"], shown["payload"]) == ("doc-42", {"doc": 42})  # skip: kept


def test_unique__tasks_show_unique_key__null_without(api_client, task) -> None:
    plain = post(api_client, "/jobs", {"payload": 1}).json()["id"]
    assert task(plain)["unique_key"] is None
    listed = api_client.get("/jobs").json()["results"]
    assert [t["unique_key"] for t in listed] == [None]


def test_unique__key_belongs_to_its_queue(api_client) -> None:
    a = post(api_client, "/jobs", {**job(), "queue": "a"})
    b = post(api_client, "/jobs", {**job(), "queue": "b"})
    assert (a.status_code, b.status_code) == (201, 201)


def test_unique__list_filter_by_unique_key(api_client) -> None:
    one = post(api_client, "/jobs", job("k1")).json()["id"]
    post(api_client, "/jobs", job("k2"))
    post(api_client, "/jobs", {"payload": 1})
    found = api_client.get("/jobs", {"unique_key": "k1"}).json()["results"]
    assert [t["id"] for t in found] == [one]
    assert api_client.get("/jobs", {"unique_key": "x" * 256}).status_code == 400
    assert api_client.get("/jobs", {"unique_key": ""}).status_code == 400


def test_unique_finished__held_while_running__free_once_done(api_client, claim) -> None:
    first = post(api_client, "/jobs", job()).json()["id"]
    got = claim()
    assert post(api_client, "/jobs", job()).json()["id"] == first  # handed out: still holds
    post(api_client, f"/jobs/{first}/ack?lease_id={got['lease_id']}")
    after = post(api_client, "/jobs", job())
    assert after.status_code == 201 and after.json()["id"] != first


def test_unique_finished__dead_or_cancelled__no_holder(api_client, claim) -> None:
    first = post(api_client, "/jobs", {**job(), "max_attempts": 1}).json()["id"]
    got = claim()
    post(api_client, f"/jobs/{first}/nack?lease_id={got['lease_id']}")
    second = post(api_client, "/jobs", job())
    assert second.status_code == 201
    assert api_client.delete(f"/jobs/{second.json()['id']}").status_code == 204
    assert post(api_client, "/jobs", job()).status_code == 201


def test_unique_started__a_new_task_may_wait_while_one_runs(api_client, claim) -> None:
    started = job(until="started")
    first = post(api_client, "/jobs", started).json()["id"]
    claim()
    second = post(api_client, "/jobs", started)
    assert second.status_code == 201
    third = post(api_client, "/jobs", started)
    assert (third.status_code, third.json()["id"]) == (200, second.json()["id"])
    assert first != second.json()["id"]


def test_unique_period__throttle_one_per_period_in_any_state(api_client, claim, clock) -> None:
    hourly = job("report", until="period", period_s=3600)
    first = post(api_client, "/jobs", hourly).json()["id"]
    got = claim()
    post(api_client, f"/jobs/{first}/ack?lease_id={got['lease_id']}")
    clock.advance(3_599_000)
    again = post(api_client, "/jobs", hourly)
    assert (again.status_code, again.json()["id"]) == (200, first)  # done, but in its period
    clock.advance(1_000)
    assert post(api_client, "/jobs", hourly).status_code == 201


def test_unique__oldest_qualifying_task_is_the_holder(api_client, claim) -> None:
    started = job(until="started")
    first = post(api_client, "/jobs", started).json()["id"]
    got = claim()
    second = post(api_client, "/jobs", started).json()["id"]
    # The first one fails and waits for its retry beside the second: both pending again.
    post(api_client, f"/jobs/{first}/nack?lease_id={got['lease_id']}")
    assert post(api_client, "/jobs", started).json()["id"] == first
    assert Task.objects.get(pk=int(second)).state == "ready"


def test_unique_replace__pending_holder_takes_the_new_body(api_client, task) -> None:
    first = post(api_client, "/jobs", job()).json()["id"]
    body = {**job(payload={"doc": 42, "v": 2}, on_conflict="replace"), "priority": "high",
            "max_attempts": 7}  # fmt: skip
    again = post(api_client, "/jobs", body)
    assert (again.status_code, again.json()) == (
        200, {"id": first, "deduplicated": True, "replaced": True}
    )  # fmt: skip
    shown = task(first)
    assert (shown["payload"], shown["priority"], shown["max_attempts"]) == (
        {"doc": 42, "v": 2}, "high", 7
    )  # fmt: skip


def test_unique_replace__handed_out_holder_never_changed(api_client, claim, task) -> None:
    first = post(api_client, "/jobs", job()).json()["id"]
    claim()
    again = post(api_client, "/jobs", job(payload={"v": 2}, on_conflict="replace"))
    assert again.json() == {"id": first, "deduplicated": True}
    assert task(first)["payload"] == {"doc": 42}
    assert Task.objects.get(pk=int(first)).absorbed == 0


def test_unique_replace__invalid_body__400_holder_unchanged(api_client, task) -> None:
    first = post(api_client, "/jobs", job()).json()["id"]
    r = post(api_client, "/jobs", {**job(on_conflict="replace"), "max_attempts": 0})
    assert r.status_code == 400
    assert task(first)["max_attempts"] == 3


def test_unique_debounce__new_task_starts_delayed_by_debounce(api_client, task) -> None:
    first = post(api_client, "/jobs", job(debounce_ms=2000)).json()["id"]
    shown = task(first)
    assert shown["state"] == "delayed"
    delay = parse_time(shown["available_at"]) - parse_time(shown["created_at"])
    assert timedelta(milliseconds=1999) <= delay <= timedelta(milliseconds=2001)


def test_unique_debounce__burst_runs_once_after_the_last(
    api_client, clock, claim_nothing, claim
) -> None:
    ids = set()
    for _ in range(100):
        ids.add(post(api_client, "/jobs", job(debounce_ms=2000)).json()["id"])
        clock.advance(100)  # a save every 100 ms: each pushes the run 2 s past itself
    assert len(ids) == 1
    (holder,) = ids
    assert queue.promote_delayed() == 0
    claim_nothing()
    clock.advance(1850)
    assert queue.promote_delayed() == 0  # 1.95 s after the last enqueue: not yet
    clock.advance(100)
    assert queue.promote_delayed() == 1
    assert claim()["task"]["id"] == holder
    assert Task.objects.get(pk=int(holder)).absorbed == 99
    assert totals(api_client)["deduplicated"] == 99
    assert Task.objects.count() == 1


def test_unique_debounce__never_later_than_max_after_creation(api_client, clock, task) -> None:
    first = post(api_client, "/jobs", job(debounce_ms=2000, debounce_max_ms=5000)).json()["id"]
    created = parse_time(task(first)["created_at"])
    for _ in range(10):
        clock.advance(1000)
        post(api_client, "/jobs", job(debounce_ms=2000, debounce_max_ms=5000))
    assert parse_time(task(first)["available_at"]) == created + timedelta(milliseconds=5000)


def test_unique_debounce__zero_makes_a_delayed_holder_ready(api_client, claim) -> None:
    first = post(api_client, "/jobs", job(debounce_ms=60_000)).json()["id"]
    post(api_client, "/jobs", job(debounce_ms=0))
    assert claim()["task"]["id"] == first


def test_unique_debounce__ready_holder_waits_again(api_client, claim_nothing, task) -> None:
    first = post(api_client, "/jobs", job()).json()["id"]
    post(api_client, "/jobs", job(debounce_ms=60_000))
    assert task(first)["state"] == "delayed"
    claim_nothing()
    stats = api_client.get("/stats").json()
    assert (stats["ready"], stats["delayed"]) == (0, 1)


def test_unique_debounce__handed_out_holder_not_pushed(api_client, claim, task) -> None:
    first = post(api_client, "/jobs", job()).json()["id"]
    claim()
    post(api_client, "/jobs", job(debounce_ms=60_000))
    assert task(first)["state"] == "handed_out"


def test_unique_debounce__blocked_holder_keeps_it_as_its_delay(api_client, claim, task) -> None:
    parent = post(api_client, "/jobs", {"payload": 0}).json()["id"]
    first = post(api_client, "/jobs", {**job(), "after": [parent]}).json()["id"]
    post(api_client, "/jobs", job(debounce_ms=60_000))
    assert task(first)["state"] == "blocked"
    got = claim()
    post(api_client, f"/jobs/{parent}/ack?lease_id={got['lease_id']}")
    shown = task(first)
    assert shown["state"] == "delayed"
    assert parse_time(shown["available_at"]) - parse_time(shown["updated_at"]) >= timedelta(
        seconds=59
    )


def test_unique__idempotency_key_looked_at_first(api_client) -> None:
    first = post(api_client, "/jobs", {**job(), "idempotency_key": "i1"})
    again = post(api_client, "/jobs", {**job(), "idempotency_key": "i1"})
    assert (again.status_code, again.json()) == (200, first.json())  # a retried post
    other = post(api_client, "/jobs", {**job(), "idempotency_key": "i2"})
    assert other.json() == {"id": first.json()["id"], "deduplicated": True}


def test_unique__with_a_task_key(api_client) -> None:
    first = post(api_client, "/jobs", {**job(), "key": "tenant-1"})
    again = post(api_client, "/jobs", {**job(), "key": "tenant-1"})
    assert (first.status_code, again.status_code) == (201, 200)


@pytest.mark.parametrize(
    ("unique", "field"),
    [
        ({"key": "k", "until": "sometime"}, "unique.until"),
        ({"key": "k", "colour": 1}, "unique.colour"),
        ({"key": "k", "until": "period"}, "unique.period_s"),
        ({"key": "k", "period_s": 60}, "unique.period_s"),
        ({"key": "k", "until": "period", "period_s": 0}, "unique.period_s"),
        ({"key": "k", "until": "period", "period_s": 604801}, "unique.period_s"),
        ({"key": "k", "debounce_max_ms": 10}, "unique.debounce_max_ms"),
        ({"key": "k", "debounce_ms": -1}, "unique.debounce_ms"),
        ({"key": "k", "debounce_ms": 7 * 86_400_000 + 1}, "unique.debounce_ms"),
        (
            {"key": "k", "debounce_ms": 1, "debounce_max_ms": 30 * 86_400_000 + 1},
            "unique.debounce_max_ms",
        ),
        ({"key": "k", "on_conflict": "merge"}, "unique.on_conflict"),
        ({"key": ""}, "unique.key"),
        ({"key": "x" * 256}, "unique.key"),
        ({"key": "a\x00b"}, "unique.key"),
        ({"key": 5}, "unique.key"),
        ({}, "unique.key"),
        ("k", "unique"),
    ],
)
def test_unique__bad_field__400_naming_it(api_client, unique: Any, field: str) -> None:
    r = post(api_client, "/jobs", {"payload": 1, "unique": unique})
    assert r.status_code == 400, r.content
    assert field in r.json()["fields"], r.json()
    assert Task.objects.count() == 0


def test_unique__debounce_with_delay__400(api_client) -> None:
    r = post(api_client, "/jobs", {**job(debounce_ms=10), "delay_ms": 5})
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["unique.debounce_ms"]


def test_unique__null__none(api_client) -> None:
    assert post(api_client, "/jobs", {"payload": 1, "unique": None}).status_code == 201
    assert post(api_client, "/jobs", {"payload": 1, "unique": None}).status_code == 201


def test_unique_batch__earlier_item_holds__its_id_and_indexes(api_client) -> None:
    jobs = [
        job("a"),
        job("b"),
        {"payload": 1},
        job("a"),
        job("b", on_conflict="replace", payload=9),
    ]
    r = post(api_client, "/jobs/batch", {"jobs": jobs})
    assert r.status_code == 201
    ids = r.json()["ids"]
    assert (ids[3], ids[4]) == (ids[0], ids[1])
    assert r.json()["deduplicated"] == [3, 4]
    assert Task.objects.get(pk=int(ids[1])).payload == "9"
    assert Task.objects.count() == 3
    assert (totals(api_client)["enqueued"], totals(api_client)["deduplicated"]) == (3, 2)


def test_unique_batch__stored_holder_answers(api_client) -> None:
    first = post(api_client, "/jobs", job("a")).json()["id"]
    r = post(api_client, "/jobs/batch", {"jobs": [{"payload": 0}, job("a", debounce_ms=60_000)]})
    assert r.json()["ids"][1] == first
    assert r.json()["deduplicated"] == [1]
    assert Task.objects.get(pk=int(first)).state == "delayed"
    stats = api_client.get("/stats").json()
    assert (stats["ready"], stats["delayed"]) == (1, 1)


def test_unique_batch__no_unique_items__no_deduplicated_key(api_client) -> None:
    r = post(api_client, "/jobs/batch", {"jobs": [{"payload": 0}]})
    assert list(r.json()) == ["ids"]


def test_unique_batch__bad_unique_named_by_index(api_client) -> None:
    r = post(api_client, "/jobs/batch", {"jobs": [job("a"), {"payload": 1, "unique": {"kee": 1}}]})
    assert r.status_code == 400
    assert "jobs.1.unique.kee" in r.json()["fields"]


def test_unique__metric_counts_deduplicated(api_client) -> None:
    post(api_client, "/jobs", job())
    post(api_client, "/jobs", job())
    text = api_client.get("/metrics").content.decode()
    assert "jobs_deduplicated_total 1.0" in text


def _workflow(*jobs: dict[str, Any]) -> dict[str, Any]:
    return {"name": "wf", "steps": [{"ref": f"s{i}", "job": j} for i, j in enumerate(jobs)]}


def test_unique_workflow__steps_carry_unique_keys(api_client, task) -> None:
    r = post(api_client, "/workflows", _workflow({"payload": 1}, job("w1", debounce_ms=5000)))
    assert r.status_code == 201
    shown = task(r.json()["tasks"]["s1"])
    assert (shown["unique_key"], shown["state"]) == ("w1", "delayed")
    assert post(api_client, "/jobs", job("w1")).json()["id"] == r.json()["tasks"]["s1"]


def test_unique_workflow__key_held_outside__409_naming_the_step_nothing_created(
    api_client,
) -> None:
    post(api_client, "/jobs", job("w1"))
    r = post(api_client, "/workflows", _workflow({"payload": 1}, {"payload": 2}, job("w1")))
    assert r.status_code == 409
    assert list(r.json()["fields"]) == ["steps.2.job.unique"]
    assert Task.objects.count() == 1
    assert totals(api_client)["deduplicated"] == 0


def test_unique_workflow__key_held_by_an_earlier_step__409(api_client) -> None:
    r = post(api_client, "/workflows", _workflow(job("w1"), {"payload": 2}, job("w1")))
    assert r.status_code == 409
    assert list(r.json()["fields"]) == ["steps.2.job.unique"]
    assert Task.objects.count() == 0


def test_unique_workflow__bad_unique__400_naming_the_step(api_client) -> None:
    r = post(api_client, "/workflows", _workflow({"payload": 1, "unique": {"key": "k", "x": 1}}))
    assert r.status_code == 400
    assert "steps.0.job.unique.x" in r.json()["fields"]


def test_unique_batch__stored_holder_absorbs_several_items__last_replace_wins(api_client) -> None:
    first = post(api_client, "/jobs", job("a")).json()["id"]
    jobs = [job("a", payload=1, on_conflict="replace"), job("a", payload=2), job("a", payload=3,
            on_conflict="replace"), job("a", debounce_ms=60_000)]  # fmt: skip
    r = post(api_client, "/jobs/batch", {"jobs": jobs})
    assert r.json() == {"ids": [first] * 4, "deduplicated": [0, 1, 2, 3]}
    holder = Task.objects.get(pk=int(first))
    assert (holder.payload, holder.absorbed, holder.state) == ("3", 4, "delayed")
    assert totals(api_client)["deduplicated"] == 4
    stats = api_client.get("/stats").json()
    assert (stats["ready"], stats["delayed"]) == (0, 1)


def test_unique_batch__handed_out_holder_answers_unchanged(api_client, claim) -> None:
    first = post(api_client, "/jobs", job("a")).json()["id"]
    claim()
    r = post(api_client, "/jobs/batch", {"jobs": [job("a", payload=5, on_conflict="replace")]})
    assert r.json() == {"ids": [first], "deduplicated": [0]}
    assert Task.objects.get(pk=int(first)).payload == '{"doc":42}'


def test_unique__in_an_ordered_queue__keyed_tasks_line_up_and_dedupe(api_client, claim) -> None:
    r = api_client.patch("/queues/ledger", {"ordered": True}, format="json")
    assert r.status_code == 200
    first = post(api_client, "/jobs", {**job("u1"), "queue": "ledger", "key": "acct"}).json()["id"]
    second = post(api_client, "/jobs", {**job("u2"), "queue": "ledger", "key": "acct"}).json()["id"]
    again = post(api_client, "/jobs", {**job("u2", on_conflict="replace", payload=7),
                                        "queue": "ledger", "key": "acct"})  # fmt: skip
    assert again.json() == {"id": second, "deduplicated": True, "replaced": True}
    got = claim(queue="ledger")
    assert got["task"]["id"] == first
    post(api_client, f"/jobs/{first}/ack?lease_id={got['lease_id']}")
    assert claim(queue="ledger")["task"]["payload"] == 7

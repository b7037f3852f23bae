"""Unique keys under real concurrency on PostgreSQL: enqueues racing on one queue and key make
exactly one task, on one broker process or two; a replace or a debounce racing with claims
never changes a task once handed out, and the gauges agree with the states throughout."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from broker import queue
from broker.models import Task
from tests.concurrency.conftest import in_thread
from tests.procs import http, sweeping, two_brokers

pytestmark = [pytest.mark.postgres]

RACERS = 20


def _post(client: Client, url: str, body: Any) -> tuple[int, Any]:
    r = client.post(url, json.dumps(body), content_type="application/json")
    return r.status_code, r.json()


def _race(send: Any, n: int = RACERS) -> list[Any]:
    """send(i) in n threads released at once; their answers in order."""
    start = threading.Barrier(n)
    answers: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        start.wait(timeout=30)
        answers[i] = send(i)

    threads = [in_thread(lambda i=i: run(i), errors) for i in range(n)]
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return answers


def _gauges_agree() -> None:
    stats = Client().get("/stats").json()
    states = Counter(Task.objects.values_list("state", flat=True))
    for state in ("ready", "delayed", "handed_out", "blocked", "dead"):
        assert stats[state] == states.get(state, 0), (state, stats, states)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "unique",
    [
        {"key": "race"},
        {"key": "race", "until": "started"},
        {"key": "race", "until": "period", "period_s": 3600},
        {"key": "race", "on_conflict": "replace"},
        {"key": "race", "debounce_ms": 50_000},
    ],
)
def test_unique_pg__racing_enqueues__one_task_one_201(unique: dict[str, Any]) -> None:
    rounds = 3
    for n in range(rounds):
        key = {**unique, "key": f"race-{n}"}
        answers = _race(
            lambda i, key=key: _post(Client(), "/jobs", {"payload": {"from": i}, "unique": key})
        )
        codes = sorted(code for code, _ in answers)
        assert codes == [200] * (RACERS - 1) + [201], answers
        assert len({body["id"] for _, body in answers}) == 1, answers
        assert all(body.get("deduplicated") for code, body in answers if code == 200)
        assert Task.objects.filter(unique_key=key["key"]).count() == 1
    totals = Client().get("/stats").json()["totals"]
    assert (totals["enqueued"], totals["deduplicated"]) == (rounds, rounds * (RACERS - 1))
    assert Task.objects.get(unique_key="race-0").absorbed == RACERS - 1
    _gauges_agree()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("same_idempotency_key", [False, True])
def test_unique_pg__racing_enqueues_with_idempotency_keys__one_task(
    same_idempotency_key: bool,
) -> None:
    """As the workers client sends them: each with an idempotency key of its own (or a retried
    one, the same)."""

    def send(i: int) -> tuple[int, Any]:
        idem = "same" if same_idempotency_key else f"idem-{i}"
        body = {"payload": i, "unique": {"key": "race"}, "idempotency_key": idem}
        return _post(Client(), "/jobs", body)

    answers = _race(send)
    assert sorted(code for code, _ in answers) == [200] * (RACERS - 1) + [201], answers
    assert len({body["id"] for _, body in answers}) == 1
    assert Task.objects.count() == 1
    deduplicated = Client().get("/stats").json()["totals"]["deduplicated"]
    assert deduplicated == (0 if same_idempotency_key else RACERS - 1)


@pytest.mark.django_db(transaction=True)
def test_unique_pg__racing_batches__one_task_per_key() -> None:
    keys = [f"k{n}" for n in range(30)]

    def send(i: int) -> tuple[int, Any]:
        jobs = [{"payload": i, "unique": {"key": k}} for k in keys[i % 3 :] + keys[: i % 3]]
        return _post(Client(), "/jobs/batch", {"jobs": jobs})

    answers = _race(send, 8)
    assert all(code == 201 for code, _ in answers), answers
    assert Task.objects.count() == len(keys)
    for key in keys:
        ids = {
            body["ids"][(keys.index(key) - i % 3) % len(keys)]
            for i, (_, body) in enumerate(answers)
        }
        assert ids == {str(Task.objects.get(unique_key=key).pk)}
    totals = Client().get("/stats").json()["totals"]
    assert (totals["enqueued"], totals["deduplicated"]) == (len(keys), 7 * len(keys))
    _gauges_agree()


@pytest.mark.django_db(transaction=True)
def test_unique_pg__batches_of_new_keys_in_opposite_orders__all_201_one_task_per_key() -> None:
    """Each batch's inserts wait on the other's index entries, crosswise: PostgreSQL ends one
    as a deadlock, and it looks again instead of answering 503."""
    keys = [f"o{n}" for n in range(50)]
    for rnd in range(5):
        order = [[f"{k}-{rnd}" for k in keys], [f"{k}-{rnd}" for k in reversed(keys)]]

        def send(i: int, order: list[list[str]] = order) -> tuple[int, Any]:
            jobs = [{"payload": i, "unique": {"key": k}} for k in order[i % 2]]
            return _post(Client(), "/jobs/batch", {"jobs": jobs})

        answers = _race(send, 6)
        assert all(code == 201 for code, _ in answers), answers
        assert Task.objects.filter(unique_key__endswith=f"-{rnd}").count() == len(keys)
    _gauges_agree()


@pytest.mark.django_db(transaction=True)
def test_unique_pg__replace_and_debounce_racing_claims__handed_out_task_never_changed() -> None:
    for n in range(5):
        holder = _post(Client(), "/jobs", {"payload": "v0", "unique": {"key": f"c{n}"}})[1]["id"]

        def send(i: int, n: int = n) -> Any:
            if i == 0:
                got = queue.claim(["default"], lease_ms=30_000)
                connection.close()
                return got
            unique = {"key": f"c{n}", "on_conflict": "replace"}
            if i % 2:
                unique["debounce_ms"] = 0  # ready at once: a claim may still take it
            return _post(Client(), "/jobs", {"payload": f"v{i}", "unique": unique})

        answers = _race(send, 10)
        claimed = answers[0]
        task = Task.objects.get(pk=int(holder))
        replaced = sum(1 for a in answers[1:] if a[1].get("replaced"))
        assert task.absorbed == replaced
        if claimed:
            (delivery,) = claimed
            # What the worker was handed is what the task holds: nothing changed it after.
            assert json.loads(delivery.task.payload) == json.loads(task.payload)
            assert task.state == "handed_out"
            queue.ack(delivery.task.pk, lease_id=delivery.lease_id)
        else:  # the claim met the row locked by an absorbing enqueue and skipped it
            assert task.state == "ready"
            queue.cancel(task.pk)
        _gauges_agree()


def test_unique_pg__20_way_race_on_two_broker_processes__one_task(
    db_url: str, tmp_path: Path
) -> None:
    with two_brokers(db_url, tmp_path) as (a, b):
        for n in range(3):
            body = {"payload": n, "unique": {"key": f"two-{n}", "debounce_ms": 60_000}}
            answers = _race(lambda i, body=body: http("POST", f"{(a, b)[i % 2]}/jobs", body))
            codes = sorted(code for code, _ in answers)
            assert codes == [200] * (RACERS - 1) + [201], answers
            assert len({answer["id"] for _, answer in answers}) == 1
            status, listed = http("GET", f"{a}/jobs?unique_key=two-{n}")
            assert status == 200 and len(listed["results"]) == 1
        status, stats = http("GET", f"{b}/stats")
        assert stats["totals"]["enqueued"] == 3
        assert stats["totals"]["deduplicated"] == 3 * (RACERS - 1)
        assert stats["delayed"] == 3


def test_unique_pg__burst_of_100_debounced__runs_once_after_the_last(
    db_url: str, tmp_path: Path
) -> None:
    """Real time, a real sweeper and a worker parked on the queue: 100 saves, one task, handed
    out no sooner than debounce_ms after the last save (and promptly after it)."""
    debounce_ms = 800
    body = {"payload": {"doc": 42}, "queue": "reindex",
            "unique": {"key": "doc-42", "debounce_ms": debounce_ms}}  # fmt: skip
    with two_brokers(db_url, tmp_path) as (a, b), sweeping(db_url, tmp_path, 50):
        got: dict[str, Any] = {}

        def park() -> None:
            got["answer"] = http("GET", f"{b}/jobs/next?queue=reindex&wait_ms=20000", timeout=30)
            got["at"] = time.monotonic()

        parked = threading.Thread(target=park)
        parked.start()
        ids = set()
        for _ in range(100):
            status, answer = http("POST", f"{a}/jobs", body)
            assert status in (200, 201)
            ids.add(answer["id"])
        last = time.monotonic()
        parked.join(timeout=30)
        assert len(ids) == 1
        status, delivery = got["answer"]
        assert status == 200 and delivery["task"]["id"] == ids.pop()
        waited = got["at"] - last
        assert debounce_ms / 1000 - 0.05 <= waited <= debounce_ms / 1000 + 5, waited
        status, stats = http("GET", f"{a}/stats")
        assert (stats["totals"]["enqueued"], stats["totals"]["deduplicated"]) == (1, 99)

"""A repeated idempotency_key answers 200 with the first id and creates nothing, racing too."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.test import Client

from broker.models import Task
from tests.conftest import post

pytestmark = pytest.mark.django_db


def enqueued(api_client) -> int:
    return api_client.get("/stats").json()["totals"]["enqueued"]


def test_idempotency__repeat__200_first_id_nothing_created(api_client) -> None:
    first = post(api_client, "/jobs", {"payload": {"a": 1}, "idempotency_key": "order-17"})
    again = post(api_client, "/jobs", {"payload": {"a": 1}, "idempotency_key": "order-17"})
    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json() == first.json()
    assert again["Location"] == first["Location"] == f"/jobs/{first.json()['id']}"
    assert Task.objects.count() == 1
    assert enqueued(api_client) == 1


def test_idempotency__repeat_with_other_fields__still_the_first_task(api_client, task) -> None:
    first = post(api_client, "/jobs", {"payload": 1, "idempotency_key": "k", "queue": "a"})
    again = post(api_client, "/jobs", {"payload": 2, "idempotency_key": "k", "queue": "b"})
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    shown = task(first.json()["id"])
    assert (shown["payload"], shown["queue"], shown["idempotency_key"]) == (1, "a", "k")


def test_idempotency__first_task_finished__still_200(api_client, claim) -> None:
    first = post(api_client, "/jobs", {"payload": 1, "idempotency_key": "done-key"}).json()
    lease = claim()["lease_id"]
    post(api_client, f"/jobs/{first['id']}/ack?lease_id={lease}")
    again = post(api_client, "/jobs", {"payload": 1, "idempotency_key": "done-key"})
    assert (again.status_code, again.json()) == (200, first)


@pytest.mark.parametrize("other", ["k ", " k", "K", "k\n"])
def test_idempotency__keys_are_exact__different_key_new_task(api_client, other: str) -> None:
    a = post(api_client, "/jobs", {"payload": 1, "idempotency_key": "k"})
    b = post(api_client, "/jobs", {"payload": 1, "idempotency_key": other})
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]


def test_idempotency__null_or_absent_key__no_dedup(api_client) -> None:
    codes = [
        post(api_client, "/jobs", {"payload": 1, "idempotency_key": None}).status_code,
        post(api_client, "/jobs", {"payload": 1, "idempotency_key": None}).status_code,
        post(api_client, "/jobs", {"payload": 1}).status_code,
    ]
    assert codes == [201, 201, 201]
    assert Task.objects.count() == 3


@pytest.mark.parametrize("bad", ["x" * 256, 5, ["k"], {"k": 1}])
def test_idempotency__bad_key__400(api_client, bad) -> None:
    r = post(api_client, "/jobs", {"payload": 1, "idempotency_key": bad})
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["idempotency_key"]


def test_idempotency__key_of_255_chars__accepted(api_client) -> None:
    key = "é" * 255
    assert post(api_client, "/jobs", {"payload": 1, "idempotency_key": key}).status_code == 201
    assert post(api_client, "/jobs", {"payload": 1, "idempotency_key": key}).status_code == 200


THREADS = 16


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_idempotency_pg__racing_posts__one_201_rest_200_same_id_one_row() -> None:
    start = threading.Barrier(THREADS)

    def send(i: int) -> tuple[int, str]:
        try:
            client = Client()
            start.wait(timeout=30)  # all at once: each one's insert races the others'
            r = post(client, "/jobs", {"payload": {"from": i}, "idempotency_key": "race-1"})
            return r.status_code, r.json()["id"]
        finally:
            connection.close()

    for _round in range(3):
        Task.objects.all().delete()
        start.reset()
        with ThreadPoolExecutor(THREADS) as pool:
            answers = list(pool.map(send, range(THREADS)))
        statuses = sorted(status for status, _ in answers)
        assert statuses == [200] * (THREADS - 1) + [201], answers
        assert len({task_id for _, task_id in answers}) == 1, answers
        assert list(Task.objects.values_list("pk", flat=True)) == [int(answers[0][1])]
    client = Client()
    assert client.get("/stats").json()["totals"]["enqueued"] == 3

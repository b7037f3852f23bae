"""POST /jobs: defaults, every cap, nulls, unknown fields, payload round trips, idempotency."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from broker import queue
from broker.models import Task
from tests.api.conftest import parse_time
from tests.conftest import post

pytestmark = pytest.mark.django_db

WEEK_MS = 7 * 24 * 3600 * 1000


def bad(api_client: APIClient, body: Any) -> dict[str, Any]:
    r = post(api_client, "/jobs", body)
    assert r.status_code == 400, (r.status_code, r.content)
    assert r["Content-Type"].startswith("application/json")
    assert not Task.objects.exists()
    return r.json()


def test_enqueue__payload_only__201_location_and_every_default(api_client, task) -> None:
    r = post(api_client, "/jobs", {"payload": {"line": "hello"}})
    assert r.status_code == 201
    body = r.json()
    assert list(body) == ["id"] and isinstance(body["id"], str)
    assert r["Location"] == f"/jobs/{body['id']}"
    got = task(body["id"])
    assert got["payload"] == {"line": "hello"}
    assert (got["state"], got["attempts"], got["max_attempts"]) == ("ready", 0, 3)
    assert (got["queue"], got["priority"], got["type"]) == ("default", "normal", None)
    assert (got["errors"], got["last_error"], got["result"]) == ([], None, None)
    assert parse_time(got["available_at"]) == parse_time(got["created_at"])
    assert queue.totals()["enqueued"] == 1


def test_enqueue__every_field_given__kept(api_client, task) -> None:
    r = post(
        api_client,
        "/jobs",
        {
            "payload": [1],
            "max_attempts": 7,
            "delay_ms": 0,
            "queue": "mail.out-2_x",
            "priority": "high",
            "type": None,
            "idempotency_key": None,
        },
    )
    assert r.status_code == 201
    got = task(r.json()["id"])
    assert (got["max_attempts"], got["queue"], got["priority"]) == (7, "mail.out-2_x", "high")


@pytest.mark.parametrize("value", [1, 2, 100])
def test_enqueue__max_attempts_in_range__201(enqueue, task, value: int) -> None:
    assert task(enqueue(max_attempts=value))["max_attempts"] == value


@pytest.mark.parametrize("value", [0, -1, 101, 1000, 2.5, "3", True])
def test_enqueue__max_attempts_out_of_range_or_not_int__400(api_client, value: Any) -> None:
    body = bad(api_client, {"payload": 1, "max_attempts": value})
    assert list(body["fields"]) == ["max_attempts"]
    assert body["error"]


@pytest.mark.parametrize(
    ("delay_ms", "state"), [(0, "ready"), (1, "delayed"), (WEEK_MS, "delayed")]
)
def test_enqueue__delay_ms_in_range__ready_or_delayed(enqueue, task, delay_ms, state) -> None:
    got = task(enqueue(delay_ms=delay_ms))
    assert got["state"] == state
    waited = parse_time(got["available_at"]) - parse_time(got["created_at"])
    assert waited.total_seconds() * 1000 == delay_ms


@pytest.mark.parametrize("value", [-1, WEEK_MS + 1, 1.5, "10"])
def test_enqueue__delay_ms_out_of_range__400(api_client, value: Any) -> None:
    assert list(bad(api_client, {"payload": 1, "delay_ms": value})["fields"]) == ["delay_ms"]


@pytest.mark.parametrize("name", ["a", "A-Z_a.z-0.9", "q" * 64, "..", "-"])
def test_enqueue__queue_matching_pattern__201(enqueue, task, name: str) -> None:
    assert task(enqueue(queue=name))["queue"] == name


@pytest.mark.parametrize(
    "name", ["", "q" * 65, "a b", "a/b", "a,b", "ä", "a\n", " a", "a ", 7, ["a"]]
)
def test_enqueue__queue_not_matching_pattern__400(api_client, name: Any) -> None:
    assert list(bad(api_client, {"payload": 1, "queue": name})["fields"]) == ["queue"]


@pytest.mark.parametrize("value", ["high", "normal", "low"])
def test_enqueue__priority_known__201(enqueue, task, value: str) -> None:
    assert task(enqueue(priority=value))["priority"] == value


@pytest.mark.parametrize("value", ["urgent", "HIGH", "", 0, 1])
def test_enqueue__priority_unknown__400(api_client, value: Any) -> None:
    assert list(bad(api_client, {"payload": 1, "priority": value})["fields"]) == ["priority"]


@pytest.mark.parametrize("field", ["max_attempts", "delay_ms", "queue", "priority"])
def test_enqueue__explicit_null_for_non_nullable__400_naming_it(api_client, field: str) -> None:
    body = bad(api_client, {"payload": 1, field: None})
    assert list(body["fields"]) == [field]


def test_enqueue__null_type_and_idempotency_key__mean_none(api_client, task) -> None:
    r = post(api_client, "/jobs", {"payload": 1, "type": None, "idempotency_key": None})
    assert r.status_code == 201
    assert task(r.json()["id"])["type"] is None


def test_enqueue__unknown_field__400_naming_it(api_client) -> None:
    body = bad(api_client, {"payload": 1, "max_attempt": 5})
    assert body["fields"] == {"max_attempt": ["Unknown field."]}


def test_enqueue__several_bad_fields__each_named(api_client) -> None:
    body = bad(api_client, {"payload": 1, "max_attempts": 0, "queue": "", "extra": 1})
    assert set(body["fields"]) == {"max_attempts", "queue", "extra"}


def test_enqueue__payload_missing__400(api_client) -> None:
    assert list(bad(api_client, {"max_attempts": 3})["fields"]) == ["payload"]


@pytest.mark.parametrize(
    "payload",
    [
        None,
        0,
        -17,
        3.25,
        1e300,
        12345678901234567890123,
        True,
        False,
        "",
        "text",
        [],
        {},
        [[1, [2, [3, [None]]]], {"a": [{}]}],
        {"z": 1, "a": 2, "m": {"y": [1.5, -0.25]}},
        "ünïcödé ✓ 日本語 🎉 \u200b",
        "nul \u0000 inside",
        {"k\u0000": ["\u0000", "\x1f", "\\", '"']},
    ],
)
def test_enqueue__any_json_payload__comes_back_exactly(
    api_client, task, claim, payload: Any
) -> None:
    r = post(api_client, "/jobs", {"payload": payload})
    assert r.status_code == 201, r.content
    got = task(r.json()["id"])["payload"]
    assert got == payload and type(got) is type(payload)
    assert json.dumps(got) == json.dumps(payload)  # key order too
    assert claim()["task"]["payload"] == payload


def test_enqueue__raw_utf8_body__unicode_payload_kept(api_client, task) -> None:
    text = "Grüße, мир, 世界, 🙂"
    r = api_client.post(
        "/jobs",
        json.dumps({"payload": text}, ensure_ascii=False).encode(),
        content_type="application/json",
    )
    assert r.status_code == 201
    assert task(r.json()["id"])["payload"] == text


def test_enqueue__idempotency_key_repeated__200_same_id_nothing_created(api_client) -> None:
    first = post(api_client, "/jobs", {"payload": 1, "idempotency_key": "order-42"})
    again = post(api_client, "/jobs", {"payload": 2, "idempotency_key": "order-42"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    assert again["Location"] == first["Location"]
    assert Task.objects.count() == 1
    assert queue.totals()["enqueued"] == 1
    assert api_client.get("/stats").json()["ready"] == 1


def test_enqueue__idempotency_key__compared_exactly(api_client) -> None:
    ids = {
        post(api_client, "/jobs", {"payload": 1, "idempotency_key": key}).json()["id"]
        for key in ("k", "K", "k ", " k")
    }
    assert len(ids) == 4


def test_enqueue__idempotency_key_length__255_ok_256_400(api_client) -> None:
    r = post(api_client, "/jobs", {"payload": 1, "idempotency_key": "k" * 255})
    assert r.status_code == 201
    r = post(api_client, "/jobs", {"payload": 1, "idempotency_key": "k" * 256})
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["idempotency_key"]


def test_enqueue__idempotency_key_not_string__400(api_client) -> None:
    assert list(bad(api_client, {"payload": 1, "idempotency_key": 42})["fields"]) == [
        "idempotency_key"
    ]


def test_enqueue__unknown_type__400(api_client) -> None:
    body = bad(api_client, {"payload": 1, "type": "no-such-type"})
    assert list(body["fields"]) == ["type"]


class Greeting:
    """A registered job type whose payload must carry a string `name`."""

    def handler(self, payload: Any) -> Any:
        return f"hello {payload['name']}"

    def validate(self, payload: Any) -> dict[str, list[str]] | None:
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            return {"name": ["A string is required."]}
        return None


@pytest.fixture
def greeting_type(monkeypatch: pytest.MonkeyPatch) -> str:
    from contract.jobtypes import SPECS

    monkeypatch.setitem(SPECS, "greeting", Greeting())
    return "greeting"


def test_enqueue__registered_type_valid_payload__201(api_client, task, greeting_type) -> None:
    r = post(api_client, "/jobs", {"payload": {"name": "Ada"}, "type": greeting_type})
    assert r.status_code == 201
    assert task(r.json()["id"])["type"] == "greeting"


def test_enqueue__registered_type_bad_payload__400(api_client, greeting_type) -> None:
    body = bad(api_client, {"payload": {"name": 3}, "type": greeting_type})
    assert body["fields"] == {"payload.name": ["A string is required."]}


@pytest.mark.parametrize("body", [[{"payload": 1}], "payload", 1, None])
def test_enqueue__body_not_an_object__400(api_client, body: Any) -> None:
    r = api_client.post("/jobs", json.dumps(body), content_type="application/json")
    assert r.status_code == 400
    assert r.json()["error"]


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"{'payload': 1}",
        b"\xff\xfe",
        b'{"payload": NaN}',
        b'{"payload": Infinity}',
        b'{"payload": 1} x',
    ],
)
def test_enqueue__invalid_json__400_json(api_client, raw: bytes) -> None:
    r = api_client.post("/jobs", raw, content_type="application/json")
    assert r.status_code == 400
    assert r["Content-Type"].startswith("application/json")
    assert r.json()["error"]
    assert not Task.objects.exists()


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_enqueue__number_beyond_double_range__400_not_infinity(api_client) -> None:
    r = api_client.post("/jobs", b'{"payload": 1e999}', content_type="application/json")
    assert r.status_code == 400
    assert not Task.objects.exists()


def test_enqueue__payload_nested_255_deep__round_trips(api_client, task) -> None:
    r = api_client.post("/jobs", f'{{"payload": {nested(255)}}}', content_type="application/json")
    assert r.status_code == 201
    assert json.dumps(task(r.json()["id"])["payload"]).replace(" ", "") == nested(255)


@pytest.mark.parametrize("depth", [256, 600, 903, 905, 950, 100_000])
def test_enqueue__payload_nested_too_deep__400_never_500(api_client, depth: int) -> None:
    r = api_client.post("/jobs", f'{{"payload": {nested(depth)}}}', content_type="application/json")
    assert r.status_code == 400, r.content[:200]
    assert list(r.json()["fields"]) == ["body"]
    assert not Task.objects.exists()

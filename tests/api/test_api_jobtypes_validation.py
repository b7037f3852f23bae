"""Typed payloads are validated at enqueue: 400 naming each bad field; unknown type 400."""

from __future__ import annotations

from typing import Any

import pytest

from broker.models import Task
from contract.jobtypes import SPECS
from tests.conftest import SAMPLE_TYPES, post

pytestmark = pytest.mark.django_db


def refused(api_client, job_type: str, payload: Any) -> dict[str, list[str]]:
    r = post(api_client, "/jobs", {"type": job_type, "payload": payload})
    assert r.status_code == 400, r.content
    body = r.json()
    assert body["error"]
    assert not Task.objects.exists()
    return body["fields"]


@pytest.mark.parametrize("job_type", SAMPLE_TYPES)
def test_enqueue__each_types_sample__201_typed(api_client, task, job_type: str) -> None:
    payload = SPECS[job_type].sample("http://broker.test:8080")
    r = post(api_client, "/jobs", {"type": job_type, "payload": payload})
    assert r.status_code == 201, r.content
    shown = task(r.json()["id"])
    assert (shown["type"], shown["payload"]) == (job_type, payload)


NUMBER = "A valid number is required."
URL = "Must be an http:// or https:// URL."
URL_HOST = "Must be an http:// or https:// URL with a host."
REQUIRED = "This field is required."


def at_least(n: object) -> str:
    return f"Ensure this value is greater than or equal to {n}."


def at_most(n: object) -> str:
    return f"Ensure this value is less than or equal to {n}."


@pytest.mark.parametrize(
    ("job_type", "payload", "fields"),
    [
        ("sleep_job", {"duration_seconds": "3"}, {"duration_seconds": [NUMBER]}),
        ("sleep_job", {"duration_seconds": True}, {"duration_seconds": [NUMBER]}),
        ("sleep_job", {"duration_seconds": -1}, {"duration_seconds": [at_least(0)]}),
        ("sleep_job", {"duration_seconds": 3601}, {"duration_seconds": [at_most(3600)]}),
        ("sleep_job", {"duration_second": 1}, {"duration_second": ["Unknown field."]}),
        ("http_fetch", {}, {"url": [REQUIRED]}),
        ("http_fetch", {"url": None}, {"url": ["This field may not be null."]}),
        ("http_fetch", {"url": "ftp://example.com/x"}, {"url": [URL]}),
        ("http_fetch", {"url": "file:///etc/passwd"}, {"url": [URL]}),
        ("http_fetch", {"url": "http://"}, {"url": [URL_HOST]}),
        ("http_fetch", {"url": "http://a b/"}, {"url": [URL_HOST]}),
        ("http_fetch", {"url": "http://h:port/"}, {"url": [URL]}),
        (
            "http_fetch",
            {"url": "http://h/", "timeout_seconds": 11},
            {"timeout_seconds": [at_most(10.0)]},
        ),
        ("data_transform", {}, {"input": [REQUIRED]}),
        (
            "data_transform",
            {"input": [1]},
            {"input": ['Expected a dictionary of items but got type "list".']},
        ),
        (
            "data_transform",
            {"input": {"k": 1, "K": 2}},
            {"input": ["Keys 'k' and 'K' are the same once uppercased."]},
        ),
        ("image_resize", {"width": 10}, {"height": [REQUIRED]}),
        ("image_resize", {"width": 4097, "height": 1}, {"width": [at_most(4096)]}),
        (
            "image_resize",
            {"width": 0, "height": 2.5},
            {"width": [at_least(1)], "height": ["A valid integer is required."]},
        ),
        (
            "image_resize",
            {"width": 2, "height": 2, "scale": 0},
            {"scale": ["Must be greater than 0."]},
        ),
        ("image_resize", {"width": 2, "height": 2, "scale": 2}, {"scale": [at_most(1)]}),
        ("send_email", {"subject": "hi"}, {"to": [REQUIRED]}),
        ("send_email", {"to": "not-an-address"}, {"to": ["Enter a valid email address."]}),
        ("fail_job", {"message": 3}, {"message": ["Not a valid string."]}),
    ],
)
def test_enqueue__bad_typed_payload__400_naming_fields(
    api_client, job_type: str, payload: Any, fields: dict[str, list[str]]
) -> None:
    expected = {f"payload.{name}": messages for name, messages in fields.items()}
    assert refused(api_client, job_type, payload) == expected


@pytest.mark.parametrize("job_type", SAMPLE_TYPES)
@pytest.mark.parametrize("payload", [None, [], "text", 3])
def test_enqueue__typed_payload_not_an_object__400_payload(
    api_client, job_type: str, payload: Any
) -> None:
    fields = refused(api_client, job_type, payload)
    assert fields == {"payload": [f"The {job_type} payload must be a JSON object."]}


@pytest.mark.parametrize("job_type", ["no_such_type", "Sleep_Job", "sleep_job ", "_fields"])
def test_enqueue__unknown_type__400_naming_type(api_client, job_type: str) -> None:
    fields = refused(api_client, job_type, {})
    assert fields == {"type": [f"Unknown job type {job_type!r}."]}


@pytest.mark.parametrize(
    "body, fields",
    [
        ({"type": "no_such_type", "max_attempts": 0}, ["max_attempts", "payload", "type"]),
        (
            {"type": "sleep_job", "payload": {"duration_seconds": -1}, "max_attempts": 0},
            ["max_attempts", "payload.duration_seconds"],
        ),
        (
            {"type": "sleep_job", "payload": {"duration_seconds": -1}, "max_attemps": 3},
            ["max_attemps", "payload.duration_seconds"],
        ),
    ],
)
def test_enqueue__type_problem_beside_other_bad_fields__one_400_names_them_all(
    api_client, body: dict[str, Any], fields: list[str]
) -> None:
    r = post(api_client, "/jobs", body)
    assert r.status_code == 400, r.content
    assert sorted(r.json()["fields"]) == fields
    assert not Task.objects.exists()


def test_enqueue__untyped_payload__any_json_still_fine(api_client) -> None:
    for payload in (None, [1], "x", {"url": "ftp://x"}):
        assert post(api_client, "/jobs", {"payload": payload}).status_code == 201


def test_enqueue__defaults_are_filled_by_the_worker_not_stored(api_client, task) -> None:
    r = post(api_client, "/jobs", {"type": "sleep_job", "payload": {}})
    assert r.status_code == 201
    assert task(r.json()["id"])["payload"] == {}
    data, problems = SPECS["sleep_job"].parse({})
    assert (data, problems) == ({"duration_seconds": 3.0}, {})


def test_enqueue_batch__bad_typed_item__400_naming_item_and_field(api_client) -> None:
    jobs = [
        {"type": "sleep_job", "payload": {"duration_seconds": 0.01}},
        {"type": "http_fetch", "payload": {"url": "gopher://x"}},
        {"type": "fail_job", "payload": "no"},
    ]
    r = post(api_client, "/jobs/batch", {"jobs": jobs})
    assert r.status_code == 400
    assert r.json()["fields"] == {
        "jobs.1.payload.url": ["Must be an http:// or https:// URL."],
        "jobs.2.payload": ["The fail_job payload must be a JSON object."],
    }
    assert not Task.objects.exists()

"""Whole requests of adversarial shape, through the WSGI application gunicorn serves (both
middleware stacks, Django's and DRF's own parsing included), answered in CPU time
proportional to their size (API.md, Errors, "Bounded work for any input")."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import pytest
from django.test import RequestFactory, override_settings

from tests.fuzz.bounds import assert_bounded

# Each request commits on its own, as under gunicorn (the WSGI handler closes its connection).
pytestmark = pytest.mark.django_db(transaction=True)

REQUEST_FLOOR_S = 0.1  # a request's own work through every middleware, whatever its size
JSON_1_0 = "application/x-amz-json-1.0"
KB_8 = 8_000  # about what gunicorn takes in one header line (limit_request_field_size)
NOW = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


@pytest.fixture(scope="module")
def application(django_db_setup: None, django_db_blocker: Any) -> Any:
    from queueproject.wsgi import application

    with django_db_blocker.unblock():  # the first request's set-up is not a request's work
        _answer(application, _environ("GET", "/healthz", b"", "", {}))
    return application


def _environ(method: str, path: str, body: bytes, query: str, headers: dict[str, str]) -> dict:
    environ = RequestFactory()._base_environ(
        PATH_INFO=path, REQUEST_METHOD=method, QUERY_STRING=query,
        CONTENT_LENGTH=str(len(body)), **{"wsgi.input": io.BytesIO(body)}, **headers,
    )  # fmt: skip
    environ.setdefault("CONTENT_TYPE", "application/json")
    return environ


def _answer(application: Any, environ: dict) -> tuple[int, bytes]:
    status: list[str] = []
    response = application(environ, lambda s, h, exc_info=None: status.append(s))
    try:
        body = b"".join(response)
    finally:
        response.close()
    return int(status[0].split()[0]), body


def _bounded(
    application: Any,
    method: str,
    path: str,
    body: bytes = b"",
    query: str = "",
    **headers: str,
) -> tuple[int, bytes]:
    environ = _environ(method, path, body, query, headers)
    size = len(body) + len(query) + sum(len(v) for v in headers.values())
    what = f"{method} {path} ({size} bytes)"
    answer = assert_bounded(lambda: _answer(application, environ), size, what, REQUEST_FLOOR_S)
    assert not isinstance(answer, BaseException), answer
    status, content = answer
    assert status < 500, (what, status, content[:300])
    return status, content


def _sqs(target: str, body: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(body).encode()
    return raw, {"CONTENT_TYPE": JSON_1_0, "HTTP_X_AMZ_TARGET": f"AmazonSQS.{target}"}


@override_settings(BROKER_API_TOKENS=["a-token"], BROKER_SQS_CREDENTIALS={"AK": "SK"})
@pytest.mark.parametrize(
    "authorization",
    [
        ", ".join(["AWS4-HMAC-SHA256 " + " " * KB_8 + "x"] * 20),
        ", ".join(["AWS4-HMAC-SHA256 " + "\xa0" * (KB_8 // 2) + "=,"] * 20),
        f"AWS4-HMAC-SHA256 Credential=AK/{NOW[:8]}/r/sqs/aws4_request, Signature=0, SignedHeaders="
        + ";".join(["host", "x-amz-date"] + ["x-amz-target"] * 20_000),
    ],
    ids=["spaces", "no-break spaces", "one name signed again and again"],
)
def test_sqs__signed_by_nobody_with_a_long_authorization__403_at_once(
    application: Any, authorization: str
) -> None:
    body, headers = _sqs("ListQueues", {})
    headers["HTTP_X_AMZ_TARGET"] += "a" * KB_8  # a long header the signature would cover
    status, content = _bounded(
        application, "POST", "/sqs", body,
        HTTP_AUTHORIZATION=authorization, HTTP_X_AMZ_DATE=NOW, **headers,
    )  # fmt: skip
    assert status == 403, content


def test_sqs__a_3_mib_send_of_number_attributes__refused_at_once(application: Any) -> None:
    body, headers = _sqs("CreateQueue", {"QueueName": "n"})
    assert _bounded(application, "POST", "/sqs", body, **headers)[0] == 200
    attributes = {
        f"n{i}": {"DataType": "Number", "StringValue": "7" * 300_000 + "x"} for i in range(10)
    }
    body, headers = _sqs(
        "SendMessage",
        {
            "QueueUrl": "http://testserver/sqs/n",
            "MessageBody": "m",
            "MessageAttributes": attributes,
        },
    )
    status, content = _bounded(application, "POST", "/sqs", body, **headers)
    assert (status, json.loads(content)["__type"]) == (
        400,
        "com.amazonaws.sqs#InvalidParameterValue",
    )


def _bodies() -> Iterator[tuple[str, bytes, int]]:
    """(shape, body, the answer's status)"""
    yield "nested", b"[" * 200_000 + b"]" * 200_000, 400
    yield "whitespace", b'{"payload":' + b" " * 200_000 + b"1}", 201
    yield "digits", b'{"payload": ' + b"1" * 200_000 + b"}", 400
    yield "no-break spaces", b'{"payload": "x"}' + "\xa0".encode() * 100_000, 400


@override_settings(BROKER_MAX_BODY_BYTES=1_048_576)
@pytest.mark.parametrize(
    ("shape", "body", "status"), list(_bodies()), ids=[s for s, *_ in _bodies()]
)
def test_enqueue__adversarial_json__answered_at_once(
    application: Any, shape: str, body: bytes, status: int
) -> None:
    assert _bounded(application, "POST", "/jobs", body)[0] == status


@pytest.mark.parametrize(
    "content_type",
    ['application/json; x="' + ";" * 100_000, "application/json" + ";" * 100_000],
    ids=["semicolons in quotes", "semicolons"],
)
def test_enqueue__a_long_content_type__answered_at_once(
    application: Any, content_type: str
) -> None:
    body = json.dumps({"payload": {}}).encode()
    status, _ = _bounded(application, "POST", "/jobs", body, CONTENT_TYPE=content_type)
    assert status == 201


@pytest.mark.parametrize(
    ("path", "name"),
    [("/jobs", "queue"), ("/jobs", "cursor"), ("/stats/history", "since"), ("/jobs/next", "queue"),
     ("/dashboard/history.json", "since"), ("/admin/login/", "next")],
)  # fmt: skip
@pytest.mark.parametrize("value", [" " * 100_000, "1" * 100_000 + "x", "a," * 50_000 + ",,"])
def test_query_strings__long_adversarial_values__answered_at_once(
    application: Any, path: str, name: str, value: str
) -> None:
    query = f"{name}={quote(value)}&wait_ms=0"
    _bounded(application, "GET", path, query=query, HTTP_HOST="testserver")


@pytest.mark.parametrize("host", ["a" * 8_000 + "!", "[" + "0:" * 4_000, "a." * 4_000 + ":x"])
def test_host_header__long_adversarial__answered_at_once(application: Any, host: str) -> None:
    assert _bounded(application, "GET", "/healthz", HTTP_HOST=host)[0] == 400

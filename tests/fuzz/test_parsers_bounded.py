"""Every parser of untrusted input, fed adversarial shapes, finishes in CPU time proportional to
its input (API.md, Errors, "Bounded work for any input"): fixed shapes first (long runs of
whitespace, U+00A0, digits, brackets: the ones that made regular expressions backtrack), then
hypothesis' runs and nestings of them."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory
from hypothesis import HealthCheck, Phase, given, settings

from broker.api import middleware, parsing
from broker.history.views import parse_range
from broker.models import SqsQueue
from broker.sqs import attributes, params, queueattrs, queues, receiving, sending, sigv4
from broker.tokens import auth
from broker.workflows import graph
from contract import djtasks
from contract.limits import parse_task_id, whole_number
from tests.fuzz.bounds import assert_bounded, nested, runs

pytestmark = pytest.mark.django_db

KEY, SECRET = "AKIDFUZZ", "fuzz-secret"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
STAMP = NOW.strftime("%Y%m%dT%H%M%SZ")
SCOPE = f"Credential={KEY}/{STAMP[:8]}/us-east-1/sqs/aws4_request"
N = 100_000
# The shapes that found the quadratic parsers, each about 100 KB.
SHAPES = (
    " " * N + "x", "\xa0" * N + "x", "\t " * (N // 2) + "=", "1" * N + "x", "1" * N + ".x",
    "." + "1" * N + "e", "1e" + "1" * N + "x", "[" * N, "[" * N + "]" * N, '{"a":' * (N // 5),
    "a" * N + "!", "a." * (N // 2) + "!", ".a" * (N // 2) + "!", "a=" * (N // 2), ", " * (N // 2),
    ";" * N, "=" * N + ",", "%" * N, "\x00" * N, "é" * N, "+" * N + "json", "-" * N + "1",
)  # fmt: skip
FIFO = SqsQueue(name="q.fifo", fifo=True)

Thunk = Callable[[], Any]
_warm: set[str] = set()


def _post(body: bytes = b"{}", **meta: Any) -> HttpRequest:
    meta.setdefault("content_type", "application/json")
    return RequestFactory().post("/sqs", data=body, **meta)


def _then(parse: Callable[..., Any], *args: Any) -> Thunk:
    return lambda: parse(*args)


def _page(request: HttpRequest) -> Thunk:
    """The guard of pages reads the query string as it came (URL-encoded: up to 9 bytes a
    character): that is its size."""
    parse = _then(middleware.PageGuardMiddleware(lambda _: HttpResponse()), request)
    parse.size = len(request.META["QUERY_STRING"])  # type: ignore[attr-defined]
    return parse


def _verify(request: HttpRequest) -> Thunk:
    return lambda: sigv4.verify(request, b"{}", {KEY: SECRET}, NOW)


def _signed_headers(text: str) -> str:
    return f"{sigv4.ALGORITHM} {SCOPE}, SignedHeaders={text}, Signature=0"


# name → text → the parse to time (what it builds around the text is not timed).
PARSERS: dict[str, Callable[[str], Thunk]] = {
    "sigv4 Authorization": lambda t: _verify(
        _post(HTTP_AUTHORIZATION=f"{sigv4.ALGORITHM} {t}", HTTP_X_AMZ_DATE=STAMP)
    ),
    "sigv4 Authorization, 20 lines joined": lambda t: _verify(
        _post(HTTP_AUTHORIZATION=", ".join([f"{sigv4.ALGORITHM} {t[:8000]}"] * 20))
    ),
    "sigv4 SignedHeaders": lambda t: _verify(
        _post(
            HTTP_AUTHORIZATION=_signed_headers(t.replace(",", ";").replace(" ", "-")),
            HTTP_X_AMZ_DATE=STAMP,
            HTTP_X_AMZ_TARGET=t[:8000],
        )
    ),
    "sigv4 X-Amz-Date": lambda t: _verify(
        _post(HTTP_AUTHORIZATION=_signed_headers("host"), HTTP_X_AMZ_DATE=t)
    ),
    "sigv4 Date": lambda t: _verify(_post(HTTP_AUTHORIZATION=_signed_headers("host"), HTTP_DATE=t)),
    "sigv4 query string": lambda t: lambda: sigv4.canonical_query(t),
    "SQS Number attribute": lambda t: (
        lambda: attributes.message_attributes({"n": {"DataType": "Number", "StringValue": t}})
    ),
    "SQS attribute type": lambda t: (
        lambda: attributes.message_attributes({"n": {"DataType": t, "StringValue": "1"}})
    ),
    "SQS attribute name": lambda t: (
        lambda: attributes.message_attributes({t: {"DataType": "String", "StringValue": "v"}})
    ),
    "SQS Binary attribute": lambda t: (
        lambda: attributes.message_attributes({"b": {"DataType": "Binary", "BinaryValue": t}})
    ),
    "SQS message body": lambda t: lambda: attributes.check_text(t, "message body"),
    "SQS RedrivePolicy": lambda t: (
        lambda: queueattrs.settings_from({"RedrivePolicy": t}, fifo=False, creating=True)
    ),
    "SQS number attribute of a queue": lambda t: (
        lambda: queueattrs.settings_from(
            {"DelaySeconds": t, "FifoQueue": t[:100]}, fifo=False, creating=True
        )
    ),
    "SQS QueueUrl": lambda t: lambda: queues.name_in_url(t),
    "SQS NextToken": lambda t: lambda: queues._token_name(t),
    "SQS ReceiptHandle": lambda t: lambda: receiving.held(t, FIFO),
    "SQS MessageGroupId": lambda t: lambda: sending._tag({"MessageGroupId": t}, "x", required=True),
    "SQS batch entry Id": lambda t: lambda: params.entries({"Entries": [{"Id": t}]}),
    "JSON body": lambda t: _then(parsing.read_json, _post(t.encode())),
    "Content-Type": lambda t: _then(parsing.require_json_type, _post(content_type=t[:256])),
    "queue list": lambda t: lambda: parsing.queue_list(t),
    "integer query parameter": lambda t: lambda: parsing.query_int({"n": t}, "n", 0),
    "task id": lambda t: lambda: parse_task_id(t),
    "Content-Length": lambda t: lambda: whole_number(t),
    "bearer token": lambda t: (
        lambda: (
            auth.bearer(f"Bearer {t}"),
            auth._env_token_ok(t, ["a-token"]),
            auth.TOKEN_RE.fullmatch(t),
        )
    ),
    "Host header": lambda t: _post(HTTP_HOST=t).get_host,
    "RFC 3339 time": lambda t: lambda: parse_range({"since": t, "until": t}),
    "enqueue body fields": lambda t: (
        lambda: [
            _enqueue({"payload": {}, field: t})
            for field in ("queue", "key", "type", "idempotency_key")
        ]
    ),
    "unique key": lambda t: lambda: _enqueue({"payload": {}, "unique": {"key": t}}),
    "email address": lambda t: lambda: _enqueue({"type": "send_email", "payload": {"to": t}}),
    "fetch URL": lambda t: lambda: _enqueue({"type": "http_fetch", "payload": {"url": t}}),
    "django_task path": lambda t: lambda: _enqueue({"type": "django_task", "payload": {"path": t}}),
    "cron and time zone": lambda t: lambda: _schedule({"cron": t[:300], "timezone": t[:70]}),
    "workflow names and refs": lambda t: lambda: _workflow(t),
    "error text": lambda t: lambda: djtasks.split_error(t + "\nTraceback"),
    "page query string": lambda t: _page(RequestFactory().get("/admin/", {"q": t, t[:99]: 1})),
}


def _enqueue(body: dict[str, Any]) -> Any:
    from broker import validation

    return validation.new_task(body)


def _schedule(timing: dict[str, str]) -> Any:
    from broker import schedules

    return schedules.checked({"name": "s", "job": {"payload": {}}, **timing}, None)


def _workflow(text: str) -> Any:
    steps = [{"ref": text[:200], "job": {"payload": {}}, "after": [text[:200]]}]
    return graph.checked({"name": text, "steps": steps})


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_parser__adversarial_shapes__cpu_time_linear(name: str) -> None:
    for text in SHAPES:
        _bounded(name, text)


@pytest.mark.parametrize("name", sorted(PARSERS))
@settings(
    max_examples=15, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
)  # fmt: skip
@given(text=runs() | nested())
def test_parser__generated_runs_and_nestings__cpu_time_linear(name: str, text: str) -> None:
    _bounded(name, text)


def _bounded(name: str, text: str) -> None:
    if name not in _warm:  # one-off costs (a pattern compiled at first use) are not a parse's
        _warm.add(name)
        with contextlib.suppress(Exception):
            PARSERS[name]("x")()
    parse = PARSERS[name](text)
    size = getattr(parse, "size", len(text.encode("utf-8", "surrogatepass")))
    assert_bounded(parse, size, f"{name} {text[:12]!r}")


def test_sqs_attributes__a_full_size_request_of_numbers__linear() -> None:
    """Ten Number attributes of 300,000 digits each, as a 3 MiB SendMessage carries them: the
    attributes are read before the message's size is checked."""
    raw = {f"n{i}": {"DataType": "Number", "StringValue": "7" * 300_000 + "x"} for i in range(10)}
    size = len(json.dumps(raw))
    refused = assert_bounded(lambda: attributes.message_attributes(raw), size, "3 MiB of digits")
    assert "Can't cast" in str(refused)

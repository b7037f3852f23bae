"""BROKER_API_TOKENS: every API call but /healthz needs a bearer token; 401 is JSON."""

from __future__ import annotations

import hmac
import os

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from broker import queue
from broker.tokens import auth
from tests.procs import python

TOKENS = ["first-token-abc", "second-token-xyz"]

API_CALLS = [
    ("get", "/jobs"),
    ("post", "/jobs"),
    ("get", "/jobs/next?wait_ms=0"),
    ("get", "/jobs/1"),
    ("delete", "/jobs/1"),
    ("post", "/jobs/1/ack?lease_id=x"),
    ("post", "/jobs/1/nack?lease_id=x"),
    ("post", "/jobs/1/extend?lease_id=x"),
    ("post", "/jobs/batch"),
    ("post", "/jobs/claim"),
    ("post", "/jobs/ack"),
    ("post", "/jobs/nack"),
    ("get", "/stats"),
    ("get", "/dlq"),
    ("post", "/dlq/1/requeue"),
    ("get", "/metrics"),
    ("get", "/api/schema/"),
    ("get", "/no-such-endpoint"),
]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("tokens_set")]


@pytest.fixture
def tokens_set():
    with override_settings(BROKER_API_TOKENS=TOKENS):
        yield


def _call(method: str, path: str, authorization: str | None = None):
    extra = {"HTTP_AUTHORIZATION": authorization} if authorization is not None else {}
    body = {"payload": 1} if method == "post" else None
    return getattr(APIClient(), method)(path, body, format="json", **extra)


@pytest.mark.parametrize(("method", "path"), API_CALLS)
def test_tokens_set__no_header__401_json_with_challenge(method: str, path: str) -> None:
    response = _call(method, path)
    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"error": "Missing or wrong bearer token."}
    assert response["WWW-Authenticate"] == 'Bearer realm="broker"'


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer wrong-token",
        "Bearer first-token-ab",  # a prefix
        "Bearer first-token-abcd",  # one character more
        "Bearer FIRST-TOKEN-ABC",
        "Basic Zmlyc3QtdG9rZW4tYWJj",
        "first-token-abc",
        "Bearer ",
        "Bearer first-token-abc,second-token-xyz",
    ],
)
def test_tokens_set__wrong_credentials__401_and_nothing_enqueued(authorization: str) -> None:
    response = _call("post", "/jobs", authorization)
    assert response.status_code == 401
    assert response.json() == {"error": "Missing or wrong bearer token."}
    assert queue.totals()["enqueued"] == 0


@pytest.mark.parametrize("token", TOKENS)
def test_tokens_set__any_configured_token__accepted(token: str) -> None:
    assert _call("post", "/jobs", f"Bearer {token}").status_code == 201
    assert _call("get", "/stats", f"bearer {token}").status_code == 200


def test_tokens_set__healthz__open_without_token() -> None:
    response = APIClient().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_tokens_set__pages_for_people__not_bearer_guarded() -> None:
    # Session login guards these instead (tests/admin/test_admin_staff.py).
    assert APIClient().get("/admin/login/").status_code == 200


def test_tokens_set__every_token_compared_in_constant_time_even_after_a_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    assert _call("get", "/stats", f"Bearer {TOKENS[0]}").status_code == 200
    # One comparison per token, not stopping at the first match; digests of one length.
    assert calls == [(32, 32), (32, 32)]


@override_settings(BROKER_API_TOKENS=[])
def test_tokens_unset__api_open() -> None:
    assert APIClient().get("/stats").status_code == 200


def test_tokens_env__comma_separated_with_spaces__each_token_trimmed() -> None:
    env = {
        **os.environ,
        "BROKER_API_TOKENS": "alpha, beta ,,gamma",
        "DJANGO_SETTINGS_MODULE": "queueproject.settings",
    }
    code = "from django.conf import settings; print(settings.BROKER_API_TOKENS)"
    out = python(code, env)
    assert out.stdout.strip() == "['alpha', 'beta', 'gamma']"

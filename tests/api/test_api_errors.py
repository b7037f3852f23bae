"""Errors every endpoint shares: JSON 404/405, 413 bodies, 401 without a token."""

from __future__ import annotations

import json

import pytest
from django.test import Client, override_settings

from broker.models import Task
from tests.conftest import post

pytestmark = pytest.mark.django_db


def assert_json_error(response, status: int) -> dict:
    assert response.status_code == status, (response.status_code, response.content)
    assert response["Content-Type"].startswith("application/json")
    body = json.loads(response.content)
    assert isinstance(body["error"], str) and body["error"]
    return body


@pytest.mark.parametrize(
    "path", ["/nope", "/jobs/1/ack/more", "/jobs/", "/dlq/1", "/stats/x", "/%00", "/jobs/1/retry"]
)
def test_unknown_path__404_json(api_client, path: str) -> None:
    assert_json_error(api_client.get(path), 404)
    assert_json_error(api_client.post(path), 404)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("put", "/jobs"),
        ("delete", "/jobs"),
        ("post", "/jobs/next"),
        ("post", "/jobs/1"),
        ("patch", "/jobs/1"),
        ("get", "/jobs/1/ack"),
        ("get", "/jobs/1/nack"),
        ("put", "/jobs/1/extend"),
        ("post", "/stats"),
        ("delete", "/dlq"),
        ("get", "/dlq/1/requeue"),
        ("post", "/healthz"),
    ],
)
def test_wrong_method__405_json(api_client, method: str, path: str) -> None:
    response = getattr(api_client, method)(path)
    assert_json_error(response, 405)
    assert response.has_header("Allow")


def test_body_over_limit__413_json_nothing_created(api_client) -> None:
    body = json.dumps({"payload": "x" * 262_144})
    assert_json_error(api_client.post("/jobs", body, content_type="application/json"), 413)
    assert not Task.objects.exists()


def test_body_just_under_limit__201(api_client) -> None:
    wrapper = len(json.dumps({"payload": ""}))
    body = json.dumps({"payload": "x" * (262_144 - wrapper)})
    assert len(body) == 262_144
    assert api_client.post("/jobs", body, content_type="application/json").status_code == 201


@override_settings(BROKER_MAX_BODY_BYTES=100)
@pytest.mark.parametrize("path", ["/jobs", "/jobs/1/ack?lease_id=x", "/jobs/1/nack?lease_id=x"])
def test_body_over_setting__413_json(api_client, path: str) -> None:
    assert_json_error(post(api_client, path, {"payload": "y" * 200}), 413)


def test_content_length_of_5000_digits__413_json(api_client) -> None:
    response = api_client.post("/jobs", b"{}", content_type="application/json",
                                CONTENT_LENGTH="9" * 5000)  # fmt: skip
    assert_json_error(response, 413)


def test_invalid_json__400_json(api_client) -> None:
    assert_json_error(api_client.post("/jobs", b"{]", content_type="application/json"), 400)


@override_settings(BROKER_API_TOKENS=["t-one", "t-two"])
@pytest.mark.parametrize("header", [None, "Bearer wrong", "t-one", "Basic dC1vbmU=", "Bearer "])
def test_tokens_set__missing_or_wrong__401_json(api_client, header: str | None) -> None:
    extra = {"HTTP_AUTHORIZATION": header} if header is not None else {}
    body = assert_json_error(api_client.get("/stats", **extra), 401)
    assert body["error"]
    assert_json_error(post(api_client, "/jobs", {"payload": 1}, **extra), 401)
    assert not Task.objects.exists()


@override_settings(BROKER_API_TOKENS=["t-one", "t-two"])
@pytest.mark.parametrize("token", ["t-one", "t-two"])
def test_tokens_set__right_bearer__served(api_client, token: str) -> None:
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    assert post(api_client, "/jobs", {"payload": 1}, **auth).status_code == 201
    assert api_client.get("/stats", **auth).status_code == 200


# JSON text may escape a lone surrogate, which UTF-8 cannot carry: an answer that names or repeats
# one (an unknown field, a refused value) must still be a JSON 400, not a 500.
@pytest.mark.parametrize(
    ("path", "raw"),
    [
        ("/jobs", r'{"payload": 1, "\ud800": 1}'),
        ("/jobs", r'{"payload": 1, "priority": "\ud800"}'),
        ("/jobs", r'{"payload": 1, "after_policy": "\udfff"}'),
        ("/jobs/batch", r'{"jobs": [{"payload": 1, "priority": "\ud800"}]}'),
        ("/jobs/1/ack?lease_id=x", r'{"\ud800": 1}'),
        ("/jobs/1/extend?lease_id=x", r'{"\ud800": 1}'),
    ],
)
def test_lone_surrogate_echoed__400_json_nothing_created(api_client, path: str, raw: str) -> None:
    body = assert_json_error(api_client.post(path, raw, content_type="application/json"), 400)
    assert "\ufffd" in json.dumps(body, ensure_ascii=False), body
    assert not Task.objects.exists()


@pytest.mark.parametrize("path", ["/jobs/next?wait_ms=0&lease_ms=", "/jobs?limit=", "/dlq?limit="])
def test_integer_parameter_of_5000_digits__answered_not_500(api_client, path: str) -> None:
    # int() refuses strings of over 4300 digits; such a value is past every cap.
    response = api_client.get(path + "9" * 5000)
    assert response.status_code in (200, 204), response.content
    zeros = api_client.get(path + "0" * 5000 + "7")
    assert zeros.status_code in (200, 204), zeros.content


# The pages for people answer errors in JSON too (API.md: no request gets an HTML page).
def test_pages__form_post_without_csrf_token__403_json() -> None:
    client = Client(enforce_csrf_checks=True)
    for path in ("/admin/login/", "/dashboard/"):
        body = assert_json_error(client.post(path, {"username": "x"}, HTTP_ACCEPT="*/*"), 403)
        assert "CSRF" in body["error"]


def test_pages__method_the_docs_do_not_serve__405_json(client) -> None:
    for method in ("post", "options"):
        response = getattr(client, method)("/api/docs/", HTTP_ACCEPT="*/*")
        assert_json_error(response, 405)
        assert "GET" in response["Allow"]


@pytest.mark.parametrize("query", ["format=json", "format=api", "format=nope"])
def test_pages__docs_in_a_format_they_do_not_come_in__404_json(client, query: str) -> None:
    assert_json_error(client.get(f"/api/docs/?{query}", HTTP_ACCEPT="*/*"), 404)


@pytest.mark.parametrize(
    "path",
    ["/jobs?", "/jobs/next?wait_ms=0&", "/dlq?", "/stats/history?", "/workflows?", "/jobs/1/ack?"],
)
def test_more_query_parameters_than_django_reads__400_json(api_client, path: str) -> None:
    query = "&".join(["a"] * 1001)
    response = api_client.post(path + query) if "/ack" in path else api_client.get(path + query)
    assert "1000" in assert_json_error(response, 400)["error"]


def test_rate_of_400_digits__400_naming_it(api_client) -> None:
    raw = '{"rate_per_s": 1' + "0" * 400 + "}"
    response = api_client.patch("/queues/q", raw, content_type="application/json")
    assert list(assert_json_error(response, 400)["fields"]) == ["rate_per_s"]


def test_workflow_name_with_a_lone_surrogate__400_naming_it(api_client) -> None:
    raw = r'{"name": "w\ud800", "steps": [{"ref": "a", "job": {"payload": 1}}]}'
    response = api_client.post("/workflows", raw, content_type="application/json")
    assert list(assert_json_error(response, 400)["fields"]) == ["name"]
    assert not Task.objects.exists()


@pytest.mark.parametrize("path", ["/", "/admin/", "/dashboard/", "/jobs"])
def test_host_not_allowed__400_json(client, path: str) -> None:
    assert_json_error(client.get(path, HTTP_HOST="evil.example"), 400)


def test_head__every_readable_resource__its_get_without_a_body(api_client, enqueue) -> None:
    """HTTP's HEAD: GET's status and headers, no body; every path a GET reads but the claim's."""
    task_id = enqueue(queue="h")
    patched = api_client.patch("/queues/h", '{"paused": false}', content_type="application/json")
    assert patched.status_code == 200
    schedule = {"name": "s", "cron": "0 3 * * *", "job": {"payload": {}}}
    assert post(api_client, "/schedules", schedule).status_code == 201
    steps = [{"ref": "a", "job": {"payload": {}}}]
    flow = post(api_client, "/workflows", {"name": "w", "steps": steps})
    paths = [f"/jobs/{task_id}", "/queues/h", "/schedules/s", f"/workflows/{flow.json()['id']}"]
    for path in [*paths, "/jobs", "/queues", "/schedules", "/workflows", "/stats", "/dlq"]:
        got, head = api_client.get(path), api_client.head(path)
        assert (path, head.status_code, head["Content-Type"]) == (path, 200, got["Content-Type"])
        assert head.content == b""
    assert api_client.head("/queues/nobody-named-it").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [('{"foo": 1}', "foo"), ("{bad json", "body"), ("[1]", "body"), ("null", "body")],
)
def test_calls_that_take_no_body__a_body_they_cannot_take__400_nothing_moves(
    api_client, enqueue, body: str, field: str
) -> None:
    """A requeue and the DELETEs read no body, but one sent is read as any body is: an unknown
    field is a 400 (a typo must not pass silently), and so is what is not a JSON object."""
    task_id = enqueue(queue="nb")
    kept = {"content_type": "application/json"}
    for method, path in [("delete", f"/jobs/{task_id}"), ("post", f"/dlq/{task_id}/requeue"),
                         ("delete", "/schedules/nb"), ("delete", "/workflows/1")]:  # fmt: skip
        response = getattr(api_client, method)(path, body, **kept)
        assert (path, response.status_code) == (path, 400)
        assert field in response.json()["fields"]
    assert api_client.get(f"/jobs/{task_id}").json()["state"] == "ready"
    assert api_client.delete(f"/jobs/{task_id}", "{}", **kept).status_code == 204


@override_settings(DEBUG=True)  # `make run`: Django answers with its technical pages
@pytest.mark.parametrize(
    "path", ["/dashboard/nope", "/administrator", "/api/docs/nope", "/static/nope.js"]
)
def test_pages__unknown_path_with_debug_on__404_json(client, path: str) -> None:
    assert_json_error(client.get(path, HTTP_ACCEPT="text/html"), 404)


@override_settings(DEBUG=True)
def test_pages__error_in_a_page_with_debug_on__500_json(client, admin_user, monkeypatch) -> None:
    from broker.dashboard import views

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    client.force_login(admin_user)
    monkeypatch.setattr(views, "render", broken)
    client.raise_request_exception = False
    assert_json_error(client.get("/dashboard/", HTTP_ACCEPT="text/html"), 500)

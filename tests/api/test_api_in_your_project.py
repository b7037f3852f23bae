"""The broker's URLs inside a project of yours (API.md, "Your Django project"): the whole API under
the project's prefix, with the project's middleware, its own HTML error pages and DRF defaults,
answering exactly as at the bundled project's root: JSON errors, tokens, the body limit."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.db import DEFAULT_DB_ALIAS, DatabaseError
from django.test import Client, override_settings
from django.urls import resolve

from broker import queue
from broker.models import Task
from tests.conftest import post
from tests.hostproject.settings import HOST_PROJECT

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("in_host_project")]


@pytest.fixture
def in_host_project():
    with override_settings(**HOST_PROJECT):
        yield


def assert_json_error(response, status: int) -> dict:
    assert response.status_code == status, (response.status_code, response.content)
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = json.loads(response.content)
    assert isinstance(body["error"], str) and body["error"]
    return body


def test_enqueue_claim_ack__under_the_prefix() -> None:
    client = Client()
    r = post(client, "/queue/jobs", {"payload": {"n": 1}, "queue": "mail"})
    assert r.status_code == 201, r.content
    task_id = r.json()["id"]
    assert r["Location"] == f"/queue/jobs/{task_id}"
    got = client.get("/queue/jobs/next", {"wait_ms": 0, "queue": "mail"})
    assert got.status_code == 200, got.content
    delivery = got.json()
    assert delivery["task"]["id"] == task_id and delivery["task"]["payload"] == {"n": 1}
    r = post(client, f"/queue/jobs/{task_id}/ack?lease_id={delivery['lease_id']}", {"result": 7})
    assert r.status_code == 204, r.content
    assert client.get(f"/queue/jobs/{task_id}").json()["state"] == "done"
    assert client.get("/queue/stats").status_code == 200
    assert client.get("/queue/healthz").json() == {"status": "ok"}


def test_api_views__outside_a_projects_atomic_requests_and_login_requirement() -> None:
    # A claim in ATOMIC_REQUESTS' transaction would hold its row lock until the answer is sent.
    for path in ("/queue/jobs/next", "/queue/jobs", "/queue/jobs/1/ack", "/queue/sqs", "/queue/x"):
        view = resolve(path).func
        assert view._non_atomic_requests == {DEFAULT_DB_ALIAS}, path
        assert view.login_required is False, path


def test_metrics_and_types__under_the_prefix() -> None:
    client = Client()
    r = client.get("/queue/metrics")
    assert r.status_code == 200 and r["Content-Type"].startswith("text/plain"), r.content
    r = client.put(
        "/queue/types/resize",
        {"schema": {"type": "object", "required": ["width"]}, "description": "Resize."},
        content_type="application/json",
    )
    assert r.status_code == 201, r.content
    assert r["Location"] == "/queue/types/resize"
    refused = post(client, "/queue/jobs", {"type": "resize", "payload": {}})
    assert "payload.width" in assert_json_error(refused, 400).get("fields", {}), refused.content


@pytest.mark.parametrize(
    "path", ["/queue/nope", "/queue/", "/queue/jobs/1/ack/more", "/queue/jobs/"]
)
def test_unknown_path_under_the_prefix__json_404_not_the_projects_page(path: str) -> None:
    client = Client()
    assert_json_error(client.get(path), 404)
    assert_json_error(client.post(path), 404)


def test_the_projects_own_paths__keep_its_own_404_page() -> None:
    r = Client().get("/elsewhere")
    assert r.status_code == 404 and b"the project's own 404 page" in r.content


def test_method_not_allowed__json_405() -> None:
    r = Client().delete("/queue/stats")
    assert_json_error(r, 405)
    assert "GET" in r["Allow"]


def test_unknown_task__json_404() -> None:
    assert_json_error(Client().get("/queue/jobs/999999"), 404)


def test_failure_in_a_view__json_500_not_the_projects_page(monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(queue, "enqueue_answer", broken)  # what POST /jobs calls
    client = Client(raise_request_exception=False)
    assert_json_error(post(client, "/queue/jobs", {"payload": {}}), 500)


def test_database_error__json_503(monkeypatch) -> None:
    def away(*args, **kwargs):
        raise DatabaseError("the database is away")

    monkeypatch.setattr(queue, "enqueue_answer", away)
    client = Client(raise_request_exception=False)
    assert_json_error(post(client, "/queue/jobs", {"payload": {}}), 503)


def test_tokens__checked_under_the_prefix_healthz_open() -> None:
    with override_settings(BROKER_API_TOKENS=["in-project-token"]):
        client = Client()
        r = post(client, "/queue/jobs", {"payload": {}})
        assert_json_error(r, 401)
        assert r["WWW-Authenticate"] == 'Bearer realm="broker"'
        assert_json_error(client.get("/queue/jobs/next?wait_ms=0"), 401)
        assert_json_error(client.get("/queue/metrics"), 401)
        assert client.get("/queue/healthz").status_code == 200
        good = {"Authorization": "Bearer in-project-token"}
        r = client.post(
            "/queue/jobs", {"payload": {}}, content_type="application/json", headers=good
        )
        assert r.status_code == 201, r.content
    assert Task.objects.count() == 1


@override_settings(BROKER_MAX_BODY_BYTES=100)
def test_body_over_the_limit__json_413() -> None:
    r = post(Client(), "/queue/jobs", {"payload": {"x": "y" * 200}})
    assert_json_error(r, 413)
    assert Task.objects.count() == 0


def test_host_not_allowed__400() -> None:
    # The project's CommonMiddleware asks first, so its own 400 page answers (not the broker's).
    r = Client().get("/queue/stats", headers={"Host": "evil.example"})
    assert r.status_code == 400


def test_sqs_endpoint__under_the_prefix() -> None:
    r = Client().post(
        "/queue/sqs",
        json.dumps({"QueueName": "orders"}),
        content_type="application/x-amz-json-1.0",
        headers={"X-Amz-Target": "AmazonSQS.CreateQueue"},
    )
    assert r.status_code == 200, r.content
    url = json.loads(r.content)["QueueUrl"]
    assert url.endswith("/queue/sqs/orders"), url


def test_dashboard__for_the_projects_staff() -> None:
    client = Client()
    r = client.get("/queue/dashboard/")
    assert r.status_code == 302 and "/admin/login/" in r["Location"]
    staff = User.objects.create_user(
        "ops", password="pw-for-tests", is_staff=True, is_superuser=True
    )
    client.force_login(staff)
    r = client.get("/queue/dashboard/")
    assert r.status_code == 200
    assert b"/queue/dashboard/data.json" in r.content
    assert client.get("/queue/dashboard/data.json").status_code == 200
    assert client.get("/queue/dashboard")["Location"] == "dashboard/"
    assert client.get("/admin/broker/task/").status_code == 200


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_sqs_body_over_the_projects_django_cap__413_not_500() -> None:
    # Django's own cap (2.5 MiB by default) is below SQS's 3 MiB: it raised RequestDataTooBig,
    # which the endpoint answered as an internal failure (500).
    r = Client().post(
        "/queue/sqs",
        json.dumps({"QueueName": "q" * 10, "Attributes": {"x": "y" * 2000}}),
        content_type="application/x-amz-json-1.0",
        headers={"X-Amz-Target": "AmazonSQS.CreateQueue"},
    )
    assert r.status_code == 413, r.content
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in json.loads(r.content)["message"]


def test_page_guard__added_to_a_projects_middleware__guards_its_admin() -> None:
    middleware = [
        "django.middleware.security.SecurityMiddleware",
        "broker.api.middleware.PageGuardMiddleware",
        *HOST_PROJECT["MIDDLEWARE"][1:],
    ]
    with override_settings(MIDDLEWARE=middleware):
        client = Client()
        staff = User.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
        client.force_login(staff)
        assert_json_error(client.get("/admin/broker/task/?q=%00"), 400)
        assert client.get("/admin/broker/task/").status_code == 200
        assert client.get("/elsewhere?q=%00").status_code == 404  # the project's own paths
        assert post(client, "/queue/jobs", {"payload": {}}).status_code == 201


def test_access_tokens__grants_under_the_prefix() -> None:
    from broker.tokens import making

    secret = making.make("tenant-a", ["all:tenant-a.*"]).secret
    client = Client(headers={"Authorization": f"Bearer {secret}"})
    assert_json_error(Client().get("/queue/stats"), 401)
    r = post(client, "/queue/jobs", {"payload": 1, "queue": "tenant-a.mail"})
    assert r.status_code == 201, r.content
    assert client.get(f"/queue/jobs/{r.json()['id']}").json()["enqueued_by"] == "tenant-a"
    assert_json_error(post(client, "/queue/jobs", {"payload": 1, "queue": "b"}), 403)
    assert_json_error(client.get("/queue/metrics"), 403)

"""Pages for people: admin, dashboard and (with tokens set) the API docs need a staff login;
CSRF stays on."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

from tests.conftest import QUICK_PASSWORD_HASHERS

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _quick_password_hashes(settings: Any) -> None:
    settings.PASSWORD_HASHERS = QUICK_PASSWORD_HASHERS


@pytest.fixture
def plain_user() -> User:
    return User.objects.create_user("plain", password="a-long-password-1")


@pytest.fixture
def staff_user() -> User:
    return User.objects.create_user("staff", password="a-long-password-2", is_staff=True)


@pytest.mark.parametrize("who", ["anonymous", "logged_in_but_not_staff"])
@pytest.mark.parametrize("path", ["/admin/", "/dashboard/"])
def test_pages__not_staff__redirected_to_the_login(path: str, who: str, plain_user: User) -> None:
    client = Client()
    if who != "anonymous":
        client.force_login(plain_user)
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


@pytest.mark.parametrize("path", ["/admin/", "/dashboard/"])
def test_pages__staff__served(path: str, staff_user: User) -> None:
    client = Client()
    client.force_login(staff_user)
    assert client.get(path).status_code == 200


def test_dashboard_data__anonymous__403_json() -> None:
    response = Client().get("/dashboard/data.json")
    assert response.status_code == 403
    assert response.json() == {"error": "Staff login required."}


def test_admin_login__post_without_csrf_token__403(staff_user: User) -> None:
    client = Client(enforce_csrf_checks=True)
    response = client.post("/admin/login/", {"username": "staff", "password": "a-long-password-2"})
    assert response.status_code == 403
    assert "_auth_user_id" not in client.session


def test_admin_login__post_with_csrf_token__logged_in(staff_user: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.get("/admin/login/")
    token = client.cookies["csrftoken"].value
    response = client.post(
        "/admin/login/",
        {"username": "staff", "password": "a-long-password-2", "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(staff_user.pk)


@override_settings(BROKER_API_TOKENS=["docs-token"])
def test_docs__tokens_set_anonymous__redirected_to_the_login() -> None:
    response = Client().get("/api/docs/")
    assert response.status_code == 302
    assert response["Location"] == "/admin/login/?next=/api/docs/"


@override_settings(BROKER_API_TOKENS=["docs-token"])
def test_docs__tokens_set_not_staff__redirected(plain_user: User) -> None:
    client = Client()
    client.force_login(plain_user)
    assert client.get("/api/docs/").status_code == 302


@override_settings(BROKER_API_TOKENS=["docs-token"])
def test_docs__tokens_set_staff__page_with_the_schema_inlined(staff_user: User) -> None:
    client = Client()
    client.force_login(staff_user)
    response = client.get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    # The browser never fetches /api/schema/ (which would need the bearer token).
    assert '"operationId": "enqueue"' in page
    assert '"bearerAuth"' in page

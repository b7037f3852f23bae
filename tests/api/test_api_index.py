"""GET /: where to go from the broker's address; HTML for a browser, JSON for a script."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from tests.api.test_api_errors import assert_json_error

pytestmark = pytest.mark.django_db

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
LINKS = {
    "dashboard": "/dashboard/",
    "admin": "/admin/",
    "api_docs": "/api/docs/",
    "api_schema": "/api/schema/",
    "metrics": "/metrics",
    "health": "/healthz",
}


def test_index__browser__html_page_linking_everywhere(django_assert_num_queries) -> None:
    with django_assert_num_queries(0):
        response = Client().get("/", HTTP_ACCEPT=BROWSER_ACCEPT)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert "Accept" in response["Vary"]
    html = response.content.decode()
    for href in LINKS.values():
        assert f'href="{href}"' in html, href


@pytest.mark.parametrize("accept", [None, "application/json", "*/*"])
def test_index__script__json_with_the_same_links(django_assert_num_queries, accept) -> None:
    headers = {"HTTP_ACCEPT": accept} if accept else {}
    with django_assert_num_queries(0):
        response = Client().get("/", **headers)

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json()["links"] == LINKS


@override_settings(BROKER_API_TOKENS=["t"])
def test_index__tokens_set__still_open_it_shows_no_data() -> None:
    response = Client().get("/", HTTP_ACCEPT=BROWSER_ACCEPT)
    assert response.status_code == 200
    assert Client().get("/stats").status_code == 401


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_index__other_methods__405_json(method: str) -> None:
    response = getattr(Client(), method)("/", HTTP_ACCEPT=BROWSER_ACCEPT)
    assert_json_error(response, 405)


@override_settings(BROKER_API_TOKENS=["t"])
def test_favicon__an_icon_open_to_every_browser(django_assert_num_queries) -> None:
    """Browsers ask every site for /favicon.ico: a 404 was a console error on each first page."""
    with django_assert_num_queries(0):
        response = Client().get("/favicon.ico")
    assert (response.status_code, response["Content-Type"]) == (200, "image/svg+xml")
    assert response.content.startswith(b"<svg")

"""Admin for job types: yours listed with their schemas, added, edited and deleted by the rules of
PUT and DELETE /types; the built-in ones shown read-only (API.md "Job types of your own")."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from django.test import Client
from rest_framework.test import APIClient

from broker.models import JobType
from broker.types import catalog
from contract.jobtypes import SPECS
from tests.conftest import post

pytestmark = pytest.mark.django_db

TYPES = "/admin/broker/jobtype/"
SCHEMA = {"type": "object", "required": ["path"]}


def _mine(name: str = "resize_image", schema: object = SCHEMA) -> JobType:
    row, _ = catalog.put(name, {"schema": schema, "description": "Resize one image."})
    return row


def test_list__yours_with_their_schemas_and_the_builtins_read_only(admin_client: Client) -> None:
    row = _mine()
    _mine("anything", None)

    html = admin_client.get(TYPES).content.decode()

    assert f'<a href="/admin/broker/jobtype/{row.pk}/change/">resize_image</a>' in html
    assert (
        "{&quot;type&quot;: &quot;object&quot;, &quot;required&quot;: [&quot;path&quot;]}" in html
    )
    assert "(any payload)" in html
    assert html.count('<tr class="builtin-type">') == len(SPECS)
    for name in SPECS:
        assert f"<td><strong>{name}</strong></td>" in html
        assert f"/admin/broker/jobtype/{name}" not in html  # no page to change them on
    assert "&quot;duration_seconds&quot;" in html  # a built-in's schema, shown


def test_add__saved_through_the_catalog_and_checked_at_enqueue(admin_client: Client) -> None:
    r = admin_client.post(f"{TYPES}add/", {
        "name": "resize_image", "description": "Resize.", "schema": json.dumps(SCHEMA),
    })  # fmt: skip
    assert r.status_code == 302, r.content.decode()[:3000]
    row = JobType.objects.get()
    assert (row.name, json.loads(row.schema), row.description) == (
        "resize_image",
        SCHEMA,
        "Resize.",
    )
    assert row.created_at == row.updated_at
    api = APIClient()
    assert post(api, "/jobs", {"type": "resize_image", "payload": {}}).status_code == 400
    assert post(api, "/jobs", {"type": "resize_image", "payload": {"path": "a"}}).status_code == 201


def test_add__empty_schema__any_payload(admin_client: Client) -> None:
    r = admin_client.post(f"{TYPES}add/", {"name": "loose", "description": "", "schema": " "})
    assert r.status_code == 302
    assert JobType.objects.get().schema is None


@pytest.mark.parametrize(
    ("form", "field", "message"),
    [
        ({"name": "sleep_job"}, "name", "A built-in job type has this name."),
        ({"name": "Bad Name"}, "name", "Must match [a-z][a-z0-9_.-]{0,63}."),
        ({"name": "t", "schema": "{nope"}, "schema", "Not JSON."),
        (
            {"name": "t", "schema": '{"type": "integr"}'},
            "schema",
            "Not a valid JSON Schema (draft 2020-12) (at type): &#x27;integr&#x27; is not valid "
            "under any of the given schemas",
        ),
        ({"name": "t", "description": "x" * 1001}, "description", "1000 characters"),
    ],
)
def test_add__refused_by_the_rules__form_error_and_nothing_saved(
    admin_client: Client, form: dict[str, str], field: str, message: str
) -> None:
    r = admin_client.post(f"{TYPES}add/", {"description": "", "schema": "", **form})
    assert r.status_code == 200  # the form again, with its errors
    html = r.content.decode()
    assert message in html, html[:5000]
    assert f"field-{field}" in html and "errorlist" in html
    assert not JobType.objects.exists()


def test_change__schema_replaced_and_updated_at_moved_forward(admin_client: Client) -> None:
    row = _mine()
    page = admin_client.get(f"{TYPES}{row.pk}/change/").content.decode()
    assert "&quot;required&quot;: [\n    &quot;path&quot;\n  ]" in page  # shown indented
    r = admin_client.post(f"{TYPES}{row.pk}/change/", {
        "description": "Any payload now.", "schema": "null",
    })  # fmt: skip
    assert r.status_code == 302, r.content.decode()[:3000]
    after = JobType.objects.get()
    assert (after.pk, after.name, after.schema, after.description) == (
        row.pk, "resize_image", None, "Any payload now.",
    )  # fmt: skip
    assert after.updated_at > row.updated_at


def test_delete__action_and_page__through_the_catalog(admin_client: Client) -> None:
    one, two = _mine("one"), _mine("two")
    r = admin_client.post(TYPES, {"action": "delete_selected", "_selected_action": [one.pk],
                                  "post": "yes"})  # fmt: skip
    assert r.status_code == 302
    r = admin_client.post(f"{TYPES}{two.pk}/delete/", {"post": "yes"})
    assert r.status_code == 302
    assert not JobType.objects.exists()


def test_staff_without_permission__403(user_with: Callable[..., Client]) -> None:
    _mine()
    assert user_with().get(TYPES).status_code == 403
    viewer = user_with("view_jobtype")
    assert viewer.get(TYPES).status_code == 200
    assert viewer.post(f"{TYPES}add/", {"name": "x"}).status_code == 403

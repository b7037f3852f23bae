"""The OpenAPI schema at /api/schema/: valid, complete against API.md, and its docs page local."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, override_settings
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

# API.md's endpoints and the answers it names for each (401/413/415/503 checked separately).
CONTRACT: dict[tuple[str, str], set[str]] = {
    ("post", "/jobs"): {"201", "200", "400"},
    ("get", "/jobs"): {"200", "400"},
    ("get", "/jobs/next"): {"200", "204", "400"},
    ("post", "/jobs/{task_id}/ack"): {"204", "400", "404", "409"},
    ("post", "/jobs/{task_id}/nack"): {"204", "400", "404", "409"},
    ("post", "/jobs/{task_id}/extend"): {"200", "400", "404", "409"},
    ("post", "/jobs/{task_id}/progress"): {"200", "400", "404", "409"},
    ("get", "/jobs/{task_id}"): {"200", "404"},
    ("delete", "/jobs/{task_id}"): {"204", "404", "409"},
    ("get", "/stats"): {"200"},
    ("get", "/stats/history"): {"200", "400"},
    ("get", "/dlq"): {"200", "400"},
    ("post", "/dlq/{task_id}/requeue"): {"204", "404"},
    ("get", "/healthz"): {"200", "503"},
    ("get", "/metrics"): {"200"},
    ("post", "/jobs/batch"): {"201", "400"},
    ("post", "/jobs/claim"): {"200", "204", "400"},
    ("post", "/jobs/ack"): {"200", "400"},
    ("post", "/jobs/nack"): {"200", "400"},
    ("get", "/queues"): {"200"},
    ("get", "/queues/{name}"): {"200", "404"},
    ("patch", "/queues/{name}"): {"200", "400"},
    ("post", "/schedules"): {"201", "400", "409"},
    ("get", "/schedules"): {"200"},
    ("get", "/schedules/{name}"): {"200", "404"},
    ("patch", "/schedules/{name}"): {"200", "400", "404"},
    ("delete", "/schedules/{name}"): {"204", "404"},
    ("post", "/workflows"): {"201", "400"},
    ("get", "/workflows"): {"200", "400"},
    ("get", "/workflows/{workflow_id}"): {"200", "404"},
    ("delete", "/workflows/{workflow_id}"): {"204", "404", "409"},
    ("get", "/types"): {"200"},
    ("get", "/types/{name}"): {"200", "404"},
    ("put", "/types/{name}"): {"201", "200", "400", "409"},
    ("delete", "/types/{name}"): {"204", "404", "409"},
    ("post", "/events"): {"202", "400"},
    ("get", "/events"): {"200", "400"},
    ("post", "/jobs/{task_id}/wait"): {"200", "400", "404", "409"},
}


def _schema(**headers: str) -> dict[str, Any]:
    response = APIClient().get("/api/schema/?format=json", **headers)
    assert response.status_code == 200, response.content
    return response.json()


def _operations(schema: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method, path): op for path, item in schema["paths"].items() for method, op in item.items()
    }


def test_schema__generated__valid_openapi_without_generator_warnings(tmp_path: Path) -> None:
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    assert out.read_text().startswith("openapi: 3.0.3")


def test_schema__every_api_md_endpoint__and_nothing_else() -> None:
    assert set(_operations(_schema())) == set(CONTRACT)


@functools.cache
def _default_operations() -> dict[tuple[str, str], dict[str, Any]]:
    """The schema with no token settings, generated once for the cases below (0.3-0.5 s a time)."""
    return _operations(_schema())


@pytest.mark.parametrize(("method", "path"), sorted(CONTRACT))
def test_schema__each_operation__documents_api_md_answers_and_503(method: str, path: str) -> None:
    op = _default_operations()[(method, path)]
    codes = set(op["responses"])
    assert codes >= CONTRACT[(method, path)] | {"503"}
    for code, answer in op["responses"].items():
        if code >= "400":
            schema = answer["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/Error"}, (code, schema)
    if "requestBody" in op:
        assert {"413", "415"} <= codes


def test_schema__error_shape__error_sentence_and_optional_fields() -> None:
    error = _schema()["components"]["schemas"]["Error"]
    assert error["required"] == ["error"]
    assert error["properties"]["fields"]["additionalProperties"] == {
        "type": "array",
        "items": {"type": "string"},
    }


def test_schema__enqueue_body__closed_with_the_contract_limits() -> None:
    body = _schema()["components"]["schemas"]["EnqueueRequest"]
    assert body["additionalProperties"] is False
    assert body["required"] == ["payload"]
    props = body["properties"]
    assert (props["max_attempts"]["minimum"], props["max_attempts"]["maximum"]) == (1, 100)
    assert props["delay_ms"]["maximum"] == 7 * 24 * 3600 * 1000
    assert props["type"]["nullable"] is True
    assert props["idempotency_key"]["maxLength"] == 255
    assert "nullable" not in props["max_attempts"]


def test_schema__tokens_unset__no_security_and_no_401() -> None:
    for op in _operations(_schema()).values():
        assert op["security"] == []
        assert "401" not in op["responses"]


@override_settings(BROKER_API_TOKENS=["schema-token"])
def test_schema__tokens_set__bearer_on_all_but_healthz_and_401_documented() -> None:
    assert APIClient().get("/api/schema/").status_code == 401
    schema = _schema(HTTP_AUTHORIZATION="Bearer schema-token")
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    for (method, path), op in _operations(schema).items():
        if path == "/healthz":
            assert op["security"] == []
            assert "401" not in op["responses"]
        else:
            assert op["security"] == [{"bearerAuth": []}], (method, path)
            assert "WWW-Authenticate" in op["responses"]["401"]["headers"]


def test_schema__default_format__yaml() -> None:
    response = APIClient().get("/api/schema/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi")
    assert response.content.startswith(b"openapi: 3.0.3")


def test_docs__tokens_unset__swagger_ui_from_local_static_files() -> None:
    client = Client()
    response = client.get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert sources, page
    assert all(src.startswith("/static/drf_spectacular_sidecar/") for src in sources), sources
    for src in sources:
        asset = client.get(src)
        assert asset.status_code == 200, src
        body = b"".join(asset.streaming_content) if asset.streaming else asset.content
        assert len(body) > 500, src

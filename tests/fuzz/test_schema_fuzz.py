"""Schemathesis against the live schema of a real gunicorn on PostgreSQL: no 5xx, no answer
outside the schema, and the counter invariant still holds afterwards."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core import NOT_SET
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import assert_invariant
from tests.procs import gunicorn

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.timeout(240)]

TOKEN = "fuzz-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_EXAMPLES = 30
BUDGET_S = 150  # a whole test, both passes; a run past it fails rather than hangs CI
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    ignored_auth,
]
# Long-polls: a generated (or defaulted) wait over this is cut to 0 before sending.
MAX_FUZZ_WAIT_MS = 20
CLAIMS = {("GET", "/jobs/next"), ("POST", "/jobs/claim")}


@pytest.fixture
def broker(db_url: str, tmp_path: Path) -> Iterator[str]:
    with gunicorn(
        db_url, tmp_path, BROKER_API_TOKENS=TOKEN, WORKERS="1", GUNICORN_THREADS="8"
    ) as base:
        yield base


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


def _load_schema(base: str) -> Any:
    response = requests.get(f"{base}/api/schema/?format=json", headers=AUTH, timeout=30)
    assert response.status_code == 200, response.text
    return schemathesis.openapi.from_dict(copy.deepcopy(response.json()))


def _short_waits(case: Any) -> None:
    """Keep long-polls short: a missing or long wait_ms becomes 0; an invalid one stays."""
    if (case.method.upper(), case.path) not in CLAIMS:
        return
    if case.path == "/jobs/next":
        query = case.query if isinstance(case.query, dict) else {}
        raw = str(query.get("wait_ms", ""))
        if raw == "" or (raw.isdigit() and int(raw) > MAX_FUZZ_WAIT_MS):
            case.query = {**query, "wait_ms": 0}
    elif case.body is NOT_SET:  # no body: every default, so a 20 s wait
        case.body = {"wait_ms": 0}
    elif isinstance(case.body, dict):
        wait = case.body.get("wait_ms", 20000)
        if type(wait) is int and wait > MAX_FUZZ_WAIT_MS:
            case.body = {**case.body, "wait_ms": 0}


def _fuzz(
    operation: Any,
    mode: GenerationMode,
    call: Callable[[Any], None],
    failures: list[str],
    **fixed: Any,
) -> None:
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode, **fixed))
    def run(case: Any) -> None:
        call(case)

    try:
        run()
    except Unsatisfiable:
        assert mode is GenerationMode.NEGATIVE, operation.label  # nothing there to make invalid
    except (Exception, BaseExceptionGroup) as exc:  # collected, so one run shows every operation's
        failures.append(f"--- {operation.label} ({mode.value}) ---\n{exc}")


def _operations(schema: Any) -> list[Any]:
    return [result.ok() for result in schema.get_all_operations()]


SHARDS = 4  # the operations dealt round-robin over this many tests, which xdist runs at once


@pytest.mark.slow  # every operation, both modes: minutes of CPU (make test-slow)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_fuzz__every_operation__no_5xx_and_every_answer_in_the_schema(
    broker: str, session: requests.Session, shard: int
) -> None:
    started = time.monotonic()
    schema = _load_schema(broker)
    failures: list[str] = []

    def call(case: Any) -> None:
        _short_waits(case)
        case.call_and_validate(base_url=broker, session=session, headers=AUTH, checks=CHECKS)

    operations = _operations(schema)
    assert len(operations) >= 17, [op.label for op in operations]
    for operation in operations[shard::SHARDS]:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz(operation, mode, call, failures)
    assert not failures, "\n\n".join(failures)
    assert time.monotonic() - started < BUDGET_S
    assert_invariant()


def _post(session: requests.Session, base: str, path: str, body: Any = None) -> Any:
    response = session.post(f"{base}{path}", json=body, headers=AUTH, timeout=10)
    assert response.status_code < 300, (path, response.status_code, response.text)
    return response.json() if response.content else None


def _held_task(session: requests.Session, base: str) -> tuple[str, str]:
    """A fresh task of its own queue, claimed: (id, lease id)."""
    queue = f"held-{time.monotonic_ns()}"
    task_id = _post(session, base, "/jobs", {"payload": {"n": 1}, "queue": queue})["id"]
    got = session.get(
        f"{base}/jobs/next", params={"wait_ms": 0, "queue": queue}, headers=AUTH, timeout=10
    )
    assert got.status_code == 200, got.text
    return task_id, got.json()["lease_id"]


def test_fuzz__settling_a_held_lease__no_5xx_and_every_answer_in_the_schema(
    broker: str, session: requests.Session
) -> None:
    """Fuzz bodies and parameters of ack, nack, extend and cancel under a real, fresh lease."""
    schema = _load_schema(broker)
    failures: list[str] = []
    by_label = {op.label: op for op in _operations(schema)}
    seen: dict[str, set[int]] = {}

    def call(case: Any) -> None:
        task_id, lease_id = _held_task(session, broker)
        case.path_parameters = {**(case.path_parameters or {}), "task_id": task_id}
        if case.path != "/jobs/{task_id}":  # ack, nack, extend: the lease, where it was put
            query = case.query if isinstance(case.query, dict) else {}
            if isinstance(case.body, dict) and "lease_id" in case.body:
                case.body = {**case.body, "lease_id": lease_id}
                if "lease_id" in query:
                    case.query = {**query, "lease_id": lease_id}
            else:
                case.query = {**query, "lease_id": lease_id}
        response = case.call_and_validate(
            base_url=broker, session=session, headers=AUTH, checks=CHECKS
        )
        seen.setdefault(case.operation.label, set()).add(response.status_code)

    for label in (
        "POST /jobs/{task_id}/ack",
        "POST /jobs/{task_id}/nack",
        "POST /jobs/{task_id}/extend",
        "DELETE /jobs/{task_id}",
    ):
        _fuzz(by_label[label], GenerationMode.POSITIVE, call, failures)
    assert not failures, "\n\n".join(failures)
    # Not vacuous: the real lease let some of each through.
    assert {label: bool(codes & {200, 204}) for label, codes in seen.items()} == dict.fromkeys(
        seen, True
    ), seen
    assert len(seen) == 4, seen
    assert_invariant()

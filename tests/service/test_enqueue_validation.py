"""broker.enqueue() refuses what POST /jobs refuses, naming the argument, and stores nothing."""

from __future__ import annotations

import math
import os
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

import broker
from broker.models import Task
from tests.procs import python

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"queue": "has space"}, "queue"),
        ({"queue": ""}, "queue"),
        ({"queue": "q" * 65}, "queue"),
        ({"priority": "urgent"}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 101}, "max_attempts"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"delay_ms": -1}, "delay_ms"),
        ({"delay_ms": 7 * 24 * 3600 * 1000 + 1}, "delay_ms"),
        ({"type": "no_such_type"}, "type"),
        ({"idempotency_key": "k" * 256}, "idempotency_key"),
        ({"key": ""}, "key"),
        ({"key": "k" * 129}, "key"),
        ({"key": "a\x00b"}, "key"),
        ({"key": 7}, "key"),
    ],
)
def test_enqueue__bad_argument__invalid_task_error_naming_it(
    kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(broker.InvalidTaskError) as caught:
        broker.enqueue({"n": 1}, **kwargs)

    assert list(caught.value.fields) == [field]
    assert isinstance(caught.value, ValueError)
    assert Task.objects.count() == 0


@pytest.mark.parametrize("payload", [{1, 2}, {"at": datetime(2024, 1, 1)}, math.nan, [math.inf]])
def test_enqueue__payload_not_json__invalid_task_error(payload: Any) -> None:
    with pytest.raises(broker.InvalidTaskError) as caught:
        broker.enqueue(payload)

    assert list(caught.value.fields) == ["payload"]
    assert Task.objects.count() == 0


def test_enqueue__payload_nested_too_deep__invalid_task_error() -> None:
    payload: Any = "leaf"
    for _ in range(300):
        payload = [payload]

    with pytest.raises(broker.InvalidTaskError, match="payload"):
        broker.enqueue(payload)


def test_enqueue__payload_over_the_body_limit__invalid_task_error(settings: Any) -> None:
    settings.BROKER_MAX_BODY_BYTES = 1000

    with pytest.raises(broker.InvalidTaskError, match="payload"):
        broker.enqueue("x" * 1000)
    assert broker.enqueue("x" * 900)


def test_enqueue__typed_payload_refused_by_its_schema__field_named() -> None:
    with pytest.raises(broker.InvalidTaskError) as caught:
        broker.enqueue({"duration_seconds": "soon"}, type="sleep_job")

    assert list(caught.value.fields) == ["payload.duration_seconds"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"run_after": datetime(2030, 1, 1)}, "aware"),  # naive on purpose
        ({"run_after": timezone.now() + timedelta(days=8)}, "7 days"),
        ({"run_after": timezone.now(), "delay_ms": 5}, "not both"),
    ],
)
def test_enqueue__bad_run_after__invalid_task_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(broker.InvalidTaskError, match=message) as caught:
        broker.enqueue("x", **kwargs)

    assert list(caught.value.fields) == ["run_after"]


def test_enqueue__run_after_in_the_past__ready_now() -> None:
    task_id = broker.enqueue("overdue", run_after=timezone.now() - timedelta(minutes=5))

    assert Task.objects.get(pk=int(task_id)).state == "ready"


def test_import_broker__before_django_setup__works_without_loading_django() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import sys, broker; assert callable(broker.enqueue); "
        "print(sorted(m for m in sys.modules if m.startswith('django')))"
    )

    done = python(code, env, timeout=30, check=False)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

"""Queue settings changed by many clients at once, on PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from rest_framework.test import APIClient

from broker.models import Queue
from tests.api.conftest import patch
from tests.concurrency.conftest import in_thread

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# Each client changes its own field of a queue nothing has named yet.
CHANGES: list[dict[str, Any]] = [
    {"paused": True},
    {"max_in_flight": 7},
    {"rate_per_s": 2.5},
] * 2


@pytest.mark.parametrize("round_", range(5))
def test_patch__fresh_name_from_many_clients_at_once__every_change_applied_200(round_: int) -> None:
    name = f"fresh-{round_}"
    go = threading.Barrier(len(CHANGES))
    statuses: list[int] = []
    errors: list[BaseException] = []

    def client(change: dict[str, Any]) -> None:
        api = APIClient()
        go.wait()
        statuses.append(patch(api, f"/queues/{name}", change).status_code)

    started = [in_thread(lambda c=c: client(c), errors) for c in CHANGES]
    for thread in started:
        thread.join(30)

    assert not errors, errors
    assert statuses == [200] * len(CHANGES)
    row = Queue.objects.get(name=name)
    assert (row.paused, row.max_in_flight, row.rate_per_s) == (True, 7, 2.5)

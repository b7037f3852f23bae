"""A runworker handler suspends with job.wait_for_event(): the runner gives the task back
(POST /jobs/{id}/wait, no ack, no nack), and once the event comes the handler runs again with
its checkpoint and the event (API.md "Waiting for events, and approvals"; docs/workers.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.api.test_api_jobtypes_worker import InProcessBroker
from tests.conftest import post
from workers.job import Job
from workers.runner import Runner

pytestmark = pytest.mark.django_db


class WaitingBroker(InProcessBroker):
    """InProcessBroker with the reports and the suspend a waiting handler sends."""

    def progress(self, task_id: str, lease_id: str, report: Any, lease_ms: Any = None) -> bool:
        return post(self.client, f"/jobs/{task_id}/progress?lease_id={lease_id}", report).ok

    def wait(self, task_id: str, lease_id: str, body: dict[str, Any]) -> bool:
        r = post(self.client, f"/jobs/{task_id}/wait?lease_id={lease_id}", body)
        return r.status_code == 200


def order(job: Job) -> Any:
    """An order waits for its payment, then ships it."""
    if job.event is None:
        job.wait_for_event("payment", f"order-{job.payload['order']}", checkpoint={"step": 1})
    return {"paid": job.event["data"]["amount"], "resumed_from": job.checkpoint}


@pytest.fixture
def runner(api_client: APIClient) -> Iterator[Runner]:
    r = Runner(WaitingBroker(api_client), resolve=lambda job: order, concurrency=1)
    yield r
    r.close()


def test_handler_waits_for_its_event__resumes_with_checkpoint_and_event(
    api_client: APIClient, runner: Runner
) -> None:
    pk = post(api_client, "/jobs", {"payload": {"order": 42}, "max_attempts": 1}).json()["id"]
    assert runner.tick() == "suspended"
    task = api_client.get(f"/jobs/{pk}").json()
    assert (task["state"], task["attempts"], task["checkpoint"]) == ("blocked", 0, {"step": 1})
    assert runner.tick() is None  # nothing to run while it waits
    posted = post(api_client, "/events", {"name": "payment", "key": "order-42",
                                          "data": {"amount": 1200}})  # fmt: skip
    assert posted.json()["released"] == 1
    assert runner.tick() == "acked"
    task = api_client.get(f"/jobs/{pk}").json()
    assert task["state"] == "done"
    assert task["result"] == {"paid": 1200, "resumed_from": {"step": 1}}
    totals = api_client.get("/stats").json()["totals"]
    assert (totals["suspended"], totals["acked"], totals["nacked"]) == (1, 1, 0)


def test_wait_for_event__bad_arguments__value_error_before_anything_is_sent() -> None:
    job = Job.bare({"order": 1})
    for kwargs in ({"event": "", "key": "k"}, {"event": "e", "key": "k", "timeout_ms": 0},
                   {"event": "e", "key": "k", "on_timeout": "later"},
                   {"event": "e", "key": "k", "checkpoint": {1, 2}}):  # fmt: skip
        with pytest.raises(ValueError):
            job.wait_for_event(**kwargs)

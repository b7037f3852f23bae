"""A handler's job: what it waited for and the event that released it, delivered with it
(API.md "Dependencies", "Waiting for events")."""

from __future__ import annotations

from typing import Any, cast

from workers.job import Job
from workers.jobtypes.merge_results import run
from workers.wire import Delivery


def _job(task: dict[str, Any]) -> Job:
    return Job(cast(Delivery, {"task": task, "lease_id": "l", "deadline": ""}))


def test_job__after_and_parents__as_delivered_results_in_after_order() -> None:
    job = _job({
        "id": "9", "payload": {}, "attempts": 1, "after": ["4", "2"],
        "parents": {"2": {"state": "done", "result": [2]}, "4": {"state": "done", "result": 4}},
    })  # fmt: skip
    assert job.after == ["4", "2"]
    assert job.parents["2"] == {"state": "done", "result": [2]}
    assert job.parent_results == [4, [2]]
    assert run({"label": "join"}, job) == {"label": "join", "inputs": {"4": 4, "2": [2]}}


def test_job__waited_for_nothing__empty() -> None:
    job = _job({"id": "1", "payload": {}, "attempts": 1})
    assert (job.after, job.parents, job.parent_results) == ([], {}, [])


def test_job__event__the_deliverys_or_none() -> None:
    event = {"id": "5", "name": "approval", "key": "order-7", "data": {"ok": True}, "at": "t"}
    assert _job({"id": "1", "payload": {}, "attempts": 1, "event": event}).event == event
    assert _job({"id": "1", "payload": {}, "attempts": 1, "event": None}).event is None
    assert _job({"id": "1", "payload": {}, "attempts": 1}).event is None  # a broker without events

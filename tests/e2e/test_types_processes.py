"""A job type put through one broker process checks payloads on another as soon as the PUT was
answered, and so does each change of its schema and its deletion (API.md "Job types of your
own": every broker process, at once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.procs import http, two_brokers

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(120)]


def _typed(base: str, payload: object) -> tuple[int, dict]:
    return http("POST", f"{base}/jobs", {"type": "resize_image", "payload": payload})


def test_types__put_on_one_broker__checked_on_the_other_at_once(
    db_url: str, tmp_path: Path
) -> None:
    with two_brokers(db_url, tmp_path) as (a, b):
        # b has read (and compiled) nothing of the type before: it is unknown there.
        status, body = _typed(b, {"width": 1})
        assert (status, body["fields"]) == (400, {"type": ["Unknown job type 'resize_image'."]})

        schema = {"type": "object", "required": ["width"],
                  "properties": {"width": {"type": "integer", "minimum": 1}}}  # fmt: skip
        assert http("PUT", f"{a}/types/resize_image", {"schema": schema})[0] == 201
        assert _typed(b, {"width": 2})[0] == 201
        status, body = _typed(b, {"width": 0})
        assert (status, body["fields"]) == (
            400,
            {"payload.width": ["0 is less than the minimum of 1"]},
        )
        assert http("GET", f"{b}/types/resize_image")[1]["schema"] == schema

        # A change through a: b's compiled copy of the old schema is not used again.
        looser = {"type": "object", "properties": {"width": {"type": "integer"}}}
        assert http("PUT", f"{a}/types/resize_image", {"schema": looser})[0] == 200
        assert _typed(b, {"width": 0})[0] == 201
        assert http("PUT", f"{b}/types/resize_image", {"schema": schema})[0] == 200
        assert _typed(a, {"width": 0})[0] == 400

        # Deleted through b: a refuses the type at once; made again, a checks the new schema.
        assert http("DELETE", f"{b}/types/resize_image")[0] == 204
        status, body = _typed(a, {"width": 2})
        assert (status, body["fields"]) == (400, {"type": ["Unknown job type 'resize_image'."]})
        assert http("PUT", f"{b}/types/resize_image", {"schema": {"type": "string"}})[0] == 201
        assert _typed(a, "x.png")[0] == 201
        assert _typed(a, {"width": 2})[0] == 400

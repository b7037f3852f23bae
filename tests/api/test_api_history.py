"""GET /stats/history: its parameters, its answer's shape, and points that add up to /stats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from broker.history import recorder
from tests.api.conftest import parse_time
from tests.conftest import post

pytestmark = pytest.mark.django_db

POINT_KEYS = [
    "at", "enqueued", "acked", "nacked", "reclaimed", "buried", "ready", "handed_out",
    "delayed", "dead", "blocked", "processing_p50_ms", "processing_p95_ms",
]  # fmt: skip
COUNTS = ("enqueued", "acked", "nacked", "reclaimed", "buried")


def history(client, query: str = "") -> dict:
    r = client.get(f"/stats/history{query}")
    assert r.status_code == 200, r.content
    return r.json()


def test_history__defaults__last_hour_by_minute_current_bucket_shown(api_client) -> None:
    body = history(api_client)
    assert list(body) == ["step", "points"]
    assert body["step"] == 60
    (point,) = body["points"]
    assert list(point) == POINT_KEYS
    at = parse_time(point["at"])
    now = datetime.now(UTC)
    assert at.second == 0 and now - timedelta(minutes=1) < at <= now
    assert all(point[k] == 0 for k in POINT_KEYS[1:11])
    assert (point["processing_p50_ms"], point["processing_p95_ms"]) == (None, None)


def test_history__after_moves__adds_up_to_the_totals(api_client, enqueue, claim) -> None:
    for _ in range(3):
        enqueue(max_attempts=1)
    held = [claim() for _ in range(3)]
    post(api_client, f"/jobs/{held[0]['task']['id']}/ack?lease_id={held[0]['lease_id']}")
    post(api_client, f"/jobs/{held[1]['task']['id']}/nack?lease_id={held[1]['lease_id']}")
    recorder.record(force=True)
    enqueue(queue="other")  # after the recording: in the current bucket all the same
    totals = api_client.get("/stats").json()["totals"]
    for step in (60, 3600):
        points = history(api_client, f"?step={step}")["points"]
        assert {k: sum(p[k] for p in points) for k in COUNTS} == {k: totals[k] for k in COUNTS}
    points = history(api_client)["points"]
    assert (points[-1]["ready"], points[-1]["handed_out"], points[-1]["dead"]) == (1, 1, 1)
    # The ack's processing time is in its minute's point: the last, unless a minute began
    # since (a slow host).
    assert [p["processing_p50_ms"] is not None for p in points].count(True) == 1


def test_history__one_queue(api_client, enqueue) -> None:
    enqueue(queue="a")
    enqueue(queue="b")
    enqueue(queue="b")
    assert [p["enqueued"] for p in history(api_client, "?queue=b")["points"]] == [2]
    assert [p["enqueued"] for p in history(api_client, "?queue=zzz")["points"]] == [0]


def test_history__range_in_the_past__nothing_recorded_there(api_client, enqueue) -> None:
    enqueue()
    recorder.record(force=True)
    since = quote("2020-01-01T00:00:00+02:00")
    body = history(api_client, f"?since={since}&until=2020-01-02T00:00:00.123456789012Z&step=3600")
    assert body == {"step": 3600, "points": []}


@pytest.mark.parametrize(
    "since",
    ["2020-12-01T10:00:00Z", "2020-12-01T10:00:00.123Z", "2020-12-01t10:00:00.5+01:00",
     "2020-12-01 10:00:00.123456789-05:30"],
)  # fmt: skip
def test_history__rfc3339_times__200(api_client, since: str) -> None:
    body = history(api_client, f"?since={quote(since)}&until=2020-12-02T00:00:00.999Z")
    assert body == {"step": 60, "points": []}


def test_history__plus_offset_unescaped_in_the_url__read_as_plus(api_client, enqueue) -> None:
    # `f"?since={dt.isoformat()}"` sends a bare "+", which a query string decodes as a space.
    enqueue()
    recorder.record(force=True)
    now = timezone.now().astimezone(timezone.get_fixed_timezone(120))
    since = (now - timedelta(hours=1)).isoformat()
    assert "+02:00" in since
    body = history(api_client, f"?since={since}&until={(now + timedelta(minutes=2)).isoformat()}")
    assert sum(p["enqueued"] for p in body["points"]) == 1  # "-02:00" would put since after until


@pytest.mark.parametrize(
    "query",
    [
        "?since=9999-12-31T23:59:59-23:59",  # past 9999 in UTC
        "?until=0001-01-01T00:00:00%2B00:00",  # an hour before it is no date
        "?since=0001-01-01T00:00:00%2B10:00&until=0001-01-01T10:00:00Z",
        "?since=1960-01-01T00:00:00Z&until=1969-12-31T23:59:59Z",
    ],
)
def test_history__times_at_the_ends_of_the_calendar__answered_never_500(
    api_client, query: str
) -> None:
    r = api_client.get(f"/stats/history{query}")
    assert r.status_code in (200, 400), r.content
    if r.status_code == 200:
        assert r.json()["points"] == []


def test_history__one_statement(api_client) -> None:
    with CaptureQueriesContext(connection) as ctx:
        history(api_client, "?step=3600&queue=q")
    assert len(ctx.captured_queries) == 1


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?step=30", "step"),
        ("?step=86400", "step"),
        ("?step=", "step"),
        ("?step=sixty", "step"),
        ("?since=yesterday", "since"),
        ("?since=2026-12-01", "since"),
        ("?since=2026-12-01T10:00:00", "since"),  # no offset: which zone?
        ("?since=2026-12-01T10:00Z", "since"),
        ("?until=2026-13-40T00:00:00Z", "until"),
        ("?until=", "until"),
        ("?since=2026-12-02T00:00:00Z&until=2026-12-01T00:00:00Z", "since"),
        ("?queue=no%20spaces", "queue"),
        ("?queue=", "queue"),
        ("?queue=" + "q" * 65, "queue"),
    ],
)
def test_history__bad_parameter__400_names_it(api_client, query: str, field: str) -> None:
    r = api_client.get(f"/stats/history{query}")
    assert r.status_code == 400, r.content
    assert list(r.json()["fields"]) == [field]

"""GET /metrics: API.md's names, the /stats totals, per-queue gauges, the duration histogram."""

from __future__ import annotations

import pytest
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from broker import queue
from broker.queue import NewTask
from tests.conftest import Clock

pytestmark = pytest.mark.django_db

API_MD_NAMES = {
    "jobs_enqueued_total",
    "jobs_completed_total",
    "jobs_failed_total",
    "jobs_dead_lettered_total",
    "queue_pending_jobs",
    "queue_running_jobs",
    "queue_delayed_jobs",
    "queue_dead_jobs",
}
HISTOGRAM = "job_processing_duration_seconds"


def scrape(client: APIClient | None = None, **headers: str) -> dict[tuple[str, tuple], float]:
    """/metrics as {(sample name, sorted labels): value}; asserts the answer is the text format."""
    response = (client or APIClient()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def enqueue(queue_name: str = "default", **fields: object) -> int:
    pk, _ = queue.enqueue(NewTask(payload="{}", queue=queue_name, **fields))
    return pk


def test_metrics__empty_broker__every_name_of_api_md_and_the_histogram() -> None:
    samples = scrape()
    names = {name for name, _ in samples}
    assert names >= API_MD_NAMES
    assert value(samples, "jobs_enqueued_total") == 0
    assert value(samples, "queue_pending_jobs", queue="default") == 0
    assert value(samples, f"{HISTOGRAM}_count") == 0
    assert value(samples, f"{HISTOGRAM}_bucket", le="+Inf") == 0


def test_metrics__prometheus_accept_header__text_format() -> None:
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    assert "jobs_enqueued_total" in {n for n, _ in scrape(HTTP_ACCEPT=accept)}
    assert "jobs_enqueued_total" in {n for n, _ in scrape(HTTP_ACCEPT="text/html")}


def test_metrics__after_every_kind_of_move__counters_equal_stats_totals(
    stopped_clock: Clock,
) -> None:
    for _ in range(3):
        enqueue(max_attempts=1)
    dying = enqueue(max_attempts=1)
    expiring = enqueue(max_attempts=2)
    cancelled = enqueue()
    queue.cancel(cancelled)
    deliveries = {d.task.pk: d for d in queue.claim(None, 1_000, limit=10)}
    for pk in set(deliveries) - {dying, expiring}:
        queue.ack(pk, lease_id=deliveries[pk].lease_id)
    queue.nack(dying, lease_id=deliveries[dying].lease_id, error="boom")
    queue.requeue(dying)
    stopped_clock.advance(2_000)
    assert queue.reclaim_expired() == 1

    samples = scrape()
    totals = APIClient().get("/stats").json()["totals"]
    assert value(samples, "jobs_enqueued_total") == totals["enqueued"] == 6
    assert value(samples, "jobs_delivered_total") == totals["delivered"] == 5
    assert value(samples, "jobs_completed_total") == totals["acked"] == 3
    assert value(samples, "jobs_failed_total") == totals["nacked"] + totals["reclaimed"] == 2
    assert value(samples, "jobs_dead_lettered_total") == totals["buried"] == 1
    for name in ("nacked", "reclaimed", "retried", "requeued", "cancelled"):
        assert value(samples, f"jobs_{name}_total") == totals[name], name


def test_metrics__tasks_in_two_queues__gauges_labelled_per_queue(
    stopped_clock: Clock,
) -> None:
    enqueue("alpha")
    enqueue("alpha")
    enqueue("beta", delay_ms=60_000)
    claimed = enqueue("gamma")
    dead = enqueue("gamma", max_attempts=1)
    for d in queue.claim(["gamma"], 30_000, limit=2):
        if d.task.pk == dead:
            queue.nack(dead, lease_id=d.lease_id)
    assert claimed

    samples = scrape()
    assert value(samples, "queue_pending_jobs", queue="alpha") == 2
    assert value(samples, "queue_delayed_jobs", queue="beta") == 1
    assert value(samples, "queue_running_jobs", queue="gamma") == 1
    assert value(samples, "queue_dead_jobs", queue="gamma") == 1
    assert value(samples, "queue_pending_jobs", queue="default") == 0
    stats = APIClient().get("/stats").json()
    for metric, state in (
        ("queue_pending_jobs", "ready"),
        ("queue_running_jobs", "handed_out"),
        ("queue_delayed_jobs", "delayed"),
        ("queue_dead_jobs", "dead"),
    ):
        total = sum(v for (name, _), v in samples.items() if name == metric)
        assert total == stats[state], metric


def test_metrics__ack_after_300ms_and_nack_after_7s__each_in_its_bucket(
    stopped_clock: Clock,
) -> None:
    first, second = enqueue(), enqueue()
    d1, d2 = queue.claim(None, 60_000, limit=2)
    stopped_clock.advance(300)
    queue.ack(d1.task.pk, lease_id=d1.lease_id)
    stopped_clock.advance(6_700)
    queue.nack(d2.task.pk, lease_id=d2.lease_id, error="slow failure")
    assert {d1.task.pk, d2.task.pk} == {first, second}

    samples = scrape()
    bucket = {
        le: value(samples, f"{HISTOGRAM}_bucket", le=le)
        for le in ("0.25", "0.5", "5.0", "10.0", "+Inf")
    }
    assert bucket == {"0.25": 0, "0.5": 1, "5.0": 1, "10.0": 2, "+Inf": 2}
    assert value(samples, f"{HISTOGRAM}_count") == 2
    assert value(samples, f"{HISTOGRAM}_sum") == pytest.approx(0.3 + 7.0, abs=1e-6)


def test_metrics__lease_expires__counted_as_failure_but_not_timed(
    stopped_clock: Clock,
) -> None:
    enqueue()
    queue.claim(None, 1_000)
    stopped_clock.advance(5_000)
    assert queue.reclaim_expired() == 1

    samples = scrape()
    assert value(samples, "jobs_failed_total") == 1
    assert value(samples, f"{HISTOGRAM}_count") == 0


def test_metrics__batch_ack_and_nack__timed_like_single_ones(
    stopped_clock: Clock,
) -> None:
    for _ in range(4):
        enqueue(max_attempts=1)
    got = queue.claim(None, 60_000, limit=4)
    stopped_clock.advance(40)
    queue.ack_many([(d.task.pk, d.lease_id, None) for d in got[:3]])
    queue.nack_many([(got[3].task.pk, got[3].lease_id, "bad")])

    samples = scrape()
    totals = queue.totals()
    assert value(samples, f"{HISTOGRAM}_count") == totals["acked"] + totals["nacked"] == 4
    assert value(samples, f"{HISTOGRAM}_bucket", le="0.025") == 0
    assert value(samples, f"{HISTOGRAM}_bucket", le="0.05") == 4


@override_settings(BROKER_API_TOKENS=["scrape-token"])
def test_metrics__tokens_set__401_without_bearer_200_with() -> None:
    response = APIClient().get("/metrics")
    assert response.status_code == 401
    assert response.json() == {"error": "Missing or wrong bearer token."}
    assert "jobs_enqueued_total" in {n for n, _ in scrape(HTTP_AUTHORIZATION="Bearer scrape-token")}


def test_metrics__queues_beyond_the_label_bound__busiest_own_rest_as_other() -> None:
    own_labels = 50  # as the README says

    for i in range(own_labels + 10):
        for _ in range(2 if i < own_labels else 1):
            enqueue(f"tenant-{i:03}")

    samples = scrape()

    shown = {dict(labels)["queue"] for name, labels in samples if name == "queue_pending_jobs"}
    assert len(shown) == own_labels + 1
    assert "tenant-000" in shown and "tenant-055" not in shown
    assert value(samples, "queue_pending_jobs", queue="other") == 10
    pending = sum(v for (name, _), v in samples.items() if name == "queue_pending_jobs")
    assert pending == queue.gauges()[0]["ready"] == 2 * own_labels + 10

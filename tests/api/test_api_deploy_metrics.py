"""deploy/: the Prometheus config and rules parse, and every metric they or the Grafana dashboard
use is one the broker exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BROKER_METRIC = re.compile(r"\b(?:jobs?|queue)_[a-z_]+\b")
PANEL_TOPICS = (
    "queue_pending_jobs",
    "jobs_completed_total",
    "jobs_failed_total",
    "job_processing_duration_seconds_bucket",
)


@pytest.fixture
def exported() -> set[str]:
    response = APIClient().get("/metrics")
    assert response.status_code == 200
    return {
        s.name for f in text_string_to_metric_families(response.content.decode()) for s in f.samples
    }


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "broker-dashboard.json").read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def _rule_exprs() -> list[str]:
    rules = yaml.safe_load((DEPLOY / "broker-alerts.yml").read_text())
    return [r["expr"] for g in rules["groups"] for r in g["rules"]]


def test_prometheus_yml__scrapes_metrics_with_a_bearer_token_file() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["authorization"]["type"] == "Bearer"
    assert "credentials_file" in job["authorization"]
    for rule_file in config["rule_files"]:
        assert (DEPLOY / rule_file).is_file()


@pytest.mark.django_db
def test_dashboard_and_rules__every_broker_metric_used__is_exported(exported: set[str]) -> None:
    used = {
        name for expr in _dashboard_exprs() + _rule_exprs() for name in BROKER_METRIC.findall(expr)
    }
    assert used
    assert used <= exported, used - exported


def test_dashboard__depth_throughput_failures_duration__each_has_a_panel() -> None:
    exprs = " ".join(_dashboard_exprs())
    for metric in PANEL_TOPICS:
        assert metric in exprs, metric

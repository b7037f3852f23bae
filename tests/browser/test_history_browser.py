"""Headless Chromium against gunicorn: the dashboard's history charts show the last hour (after a
reload too), follow new work live, per queue and over 7 days; running tasks show their progress
and it moves live."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.browser.conftest import ARTIFACTS, PASSWORD, USER, admin_page
from tests.procs import http

pytestmark = [pytest.mark.browser, pytest.mark.postgres]


def _seed() -> tuple[int, str, dict[str, list[int]]]:
    """An hour of work, recorded minute by minute as the sweeper would have (the load varies,
    some tasks wait, some fail for good), and a running task that reported progress: (its id,
    its lease, per queue [enqueued, acked, buried])."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from broker import queue
    from broker.history import recorder
    from broker.queue import NewTask, Report

    User.objects.create_superuser(USER, "ops@example.org", PASSWORD)
    real_now = timezone.now()
    sums = {"imports": [0, 0, 0], "mail": [0, 0, 0]}
    for minutes_ago in range(59, 0, -1):
        at = [real_now - timedelta(minutes=minutes_ago)]
        queue.base.timezone = SimpleNamespace(now=lambda at=at: at[0])
        try:
            for name, base in (("imports", 4), ("mail", 12)):
                n = base + (minutes_ago * 7) % 9 + (10 if 20 <= minutes_ago <= 26 else 0)
                queue.enqueue_many(
                    [
                        NewTask(payload=json.dumps({"i": i}), queue=name, max_attempts=1)
                        for i in range(n)
                    ]
                )
                held = queue.claim([name], 600_000, limit=n - 1)  # one more waits each minute
                at[0] += timedelta(milliseconds=40 + (minutes_ago % 13) * 35)  # the work
                for i, d in enumerate(held):
                    if i % 9 == 8:
                        queue.nack(d.task.pk, lease_id=d.lease_id, error="bounced")
                        sums[name][2] += 1
                    else:
                        queue.ack(d.task.pk, lease_id=d.lease_id)
                        sums[name][1] += 1
                sums[name][0] += n
            recorder.record(force=True)
        finally:
            queue.base.timezone = timezone
    queue.enqueue(NewTask(payload='{"rows": 100}', queue="reports", type="batch_import"))
    (held,) = queue.claim(["reports"], 600_000, worker="host-a:4242:worker-1")
    report = Report(fraction=0.4, message="row 40 of 100")
    queue.progress(held.task.pk, lease_id=held.lease_id, report=report)
    sums["reports"] = [1, 0, 0]
    return held.task.pk, held.lease_id, sums


def _caption(page, name: str):
    return page.locator(f'[data-sum="{name}"]')


@pytest.mark.slow  # 30 s of Chromium and a week of points: make test-slow
@pytest.mark.django_db(transaction=True)
def test_browser__history_charts__last_hour_after_a_reload_live_per_queue_and_7_days(
    db_url: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    pk, lease, sums = _seed()  # the ORM first: Playwright's event loop forbids it later
    enqueued = sum(s[0] for s in sums.values())
    acked = sum(s[1] for s in sums.values())
    buried = sum(s[2] for s in sums.values())
    assert buried > 0
    with admin_page(db_url, tmp_path, "/dashboard/", 1700) as (page, base):
        history = page.locator("#history")
        throughput = _caption(page, "throughput")
        expect(throughput).to_have_text(
            f"in {enqueued:,} · out {acked:,} over the last hour (tasks a minute)"
        )
        expect(_caption(page, "failures")).to_have_text(
            f"nacked {buried:,} · reclaimed 0 · buried {buried:,}"
        )
        expect(_caption(page, "depth")).to_contain_text("ready 118 · handed out 1 ·")
        expect(_caption(page, "processing")).to_contain_text("latest p95")
        expect(history.locator(".u-wrap canvas")).to_have_count(4)  # four uPlot charts

        running = page.locator("#running-table tr[data-task]")
        expect(running).to_have_count(1)
        expect(running.locator(".broker-progress-text")).to_have_text("40% row 40 of 100")
        page.mouse.move(0, 0)
        page.locator("#running-panel").screenshot(path=str(ARTIFACTS / "dashboard-running.png"))
        history.screenshot(path=str(ARTIFACTS / "dashboard-history.png"))

        # A reload shows the past at once: drawn from the page itself, before any fetch.
        page.reload()
        expect(throughput).to_contain_text(f"in {enqueued:,} · out {acked:,}", timeout=1000)

        # Live: new work and a new report show up without a reload.
        jobs = [{"payload": {"n": n}, "queue": "mail"} for n in range(5)]
        assert http("POST", f"{base}/jobs/batch", {"jobs": jobs})[0] == 201
        body = {"fraction": 0.6, "message": "row 60 of 100"}
        assert http("POST", f"{base}/jobs/{pk}/progress?lease_id={lease}", body)[0] == 200
        expect(throughput).to_contain_text(f"in {enqueued + 5:,} ·", timeout=12_000)
        expect(running.locator(".broker-progress-text")).to_have_text(
            "60% row 60 of 100", timeout=5_000
        )

        # One queue, then seven days by the hour: the same counts, fewer points.
        page.select_option("#history-queue", "imports")
        imports = sums["imports"]
        expect(throughput).to_contain_text(f"in {imports[0]:,} · out {imports[1]:,} over")
        page.click("[data-range='7d']")
        expect(history).to_have_attribute("data-step", "3600")
        expect(throughput).to_have_text(
            f"in {imports[0]:,} · out {imports[1]:,} over the last 7 days (tasks an hour)"
        )
        page.select_option("#history-queue", "")
        page.click("[data-range='1h']")
        expect(throughput).to_contain_text(
            f"in {enqueued + 5:,} · out {acked:,} over the last hour"
        )
        page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

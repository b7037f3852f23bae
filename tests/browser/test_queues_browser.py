"""Headless Chromium against gunicorn: pause a queue from admin, see it on the dashboard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.browser.conftest import ARTIFACTS, PASSWORD, USER, admin_page
from tests.procs import http

pytestmark = [pytest.mark.browser, pytest.mark.postgres]


def _seed() -> None:
    """Queues with work, settings and schedules (through the functions the API calls)."""
    from django.contrib.auth.models import User

    from broker import queue, queues, schedules
    from broker.queue import NewTask

    User.objects.create_superuser(USER, "ops@example.org", PASSWORD)
    for name, n in (("billing", 12), ("mail", 40), ("thumbnails", 7), ("reports", 3)):
        queue.enqueue_many([NewTask(payload=json.dumps({"i": i}), queue=name) for i in range(n)])
    queue.claim(["mail"], 600_000, limit=5)
    queues.update("billing", {"max_in_flight": 2, "rate_per_s": 5})
    queues.update("thumbnails", {"rate_per_s": 0.5})
    queues.update("maintenance", {"paused": True})
    job = {"payload": {"report": "daily"}, "queue": "reports"}
    schedules.create({"name": "nightly-report", "cron": "0 3 * * *", "timezone": "Europe/Paris",
                      "job": job})  # fmt: skip
    schedules.create({"name": "heartbeat", "every_s": 30, "job": {"payload": {"ping": 1}}})


@pytest.mark.django_db(transaction=True)
def test_browser__pause_a_queue_in_admin__dashboard_shows_it(db_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    _seed()  # the ORM first: Playwright's event loop forbids it later
    with admin_page(db_url, tmp_path, "/admin/broker/queue/", 760) as (page, base):
        rows = page.locator("#result_list tbody tr")
        expect(rows).to_have_count(5)  # billing, mail, maintenance, reports, thumbnails

        # Pause mail with the action: claims take nothing from it on any broker process.
        page.check("#result_list tbody tr:has(a:text-is('mail')) input.action-select")
        page.select_option("select[name=action]", "pause_selected")
        page.click("button[name=index]")
        expect(page.locator(".messagelist")).to_contain_text("1 queue paused.")
        assert http("GET", f"{base}/jobs/next?queue=mail&wait_ms=0")[0] == 204
        assert http("GET", f"{base}/queues/mail")[1]["paused"] is True
        page.screenshot(path=str(ARTIFACTS / "queues.png"), full_page=True)

        page.goto(f"{base}/admin/broker/schedule/")
        expect(page.locator("#result_list")).to_contain_text("every 30 s")
        page.screenshot(path=str(ARTIFACTS / "schedules.png"), full_page=True)

        page.goto(f"{base}/dashboard/")
        mail = page.locator("#queue-table tr[data-queue=mail]")
        expect(mail.locator(".dash-tag-paused")).to_have_text("paused")
        billing = page.locator("#queue-table tr[data-queue=billing]")
        expect(billing).to_contain_text("\u2264 2 in flight")
        expect(billing).to_contain_text("5/s")
        expect(page.locator("#queue-table tr[data-queue=maintenance]")).to_contain_text("paused")
        page.locator("#queue-table").screenshot(path=str(ARTIFACTS / "dashboard-queues.png"))

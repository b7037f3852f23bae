"""Headless Chromium against gunicorn: pause a queue from admin, see it on the dashboard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.browser.test_dlq_dashboard_browser import (
    ARTIFACTS,
    CHROMIUM,
    LAUNCH_ARGS,
    PASSWORD,
    USER,
)
from tests.procs import gunicorn, http

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
    if not CHROMIUM.exists():
        pytest.skip("no Chromium at /usr/bin/chromium (`apt-get install chromium`)")
    from playwright.sync_api import expect, sync_playwright

    _seed()  # the ORM first: Playwright's event loop forbids it later
    ARTIFACTS.mkdir(exist_ok=True)
    errors: list[str] = []
    with gunicorn(db_url, tmp_path, "web", WORKERS="1") as base, sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=LAUNCH_ARGS, timeout=30_000
        )
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 760})
            page.set_default_timeout(10_000)
            page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
            page.on(
                "response",
                lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None,
            )
            page.goto(f"{base}/admin/login/?next=/admin/broker/queue/")
            page.fill("#id_username", USER)
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/broker/queue/")
            page.click("#toggle-nav-sidebar")
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
            expect(page.locator("#queue-table tr[data-queue=maintenance]")).to_contain_text(
                "paused"
            )
            page.locator("#queue-table").screenshot(path=str(ARTIFACTS / "dashboard-queues.png"))
        finally:
            browser.close()
    assert errors == []

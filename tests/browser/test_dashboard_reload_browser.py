"""Headless Chromium: a reload of the dashboard keeps the history charts' range and queue (they are
in the URL) and starts the live rates chart from the last minutes of history, not empty; a staff
user who may view only the dead-letter queue gets a working page of its errors alone."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.browser.conftest import ARTIFACTS, PASSWORD, USER, admin_page

pytestmark = [pytest.mark.browser, pytest.mark.postgres]


def _seed_minutes() -> dict[str, int]:
    """The last six minutes of work, recorded minute by minute as the sweeper would have: 60
    tasks a minute in imports, 30 in mail. Per queue, how many were enqueued in all."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from broker import queue
    from broker.history import recorder
    from broker.queue import NewTask

    User.objects.create_superuser(USER, "ops@example.org", PASSWORD)
    real_now = timezone.now()
    sums = {"imports": 0, "mail": 0}
    for minutes_ago in range(6, 0, -1):
        at = real_now - timedelta(minutes=minutes_ago)
        queue.base.timezone = SimpleNamespace(now=lambda at=at: at)
        try:
            for name, n in (("imports", 60), ("mail", 30)):
                body = json.dumps({"n": 1})
                queue.enqueue_many([NewTask(payload=body, queue=name)] * n)
                sums[name] += n
            recorder.record(force=True)
        finally:
            queue.base.timezone = timezone
    return sums


@pytest.mark.django_db(transaction=True)
def test_browser__dashboard_reload__keeps_range_and_queue_and_the_live_rates(
    db_url: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    sums = _seed_minutes()  # the ORM first: Playwright's event loop forbids it later
    with admin_page(db_url, tmp_path, "/dashboard/", 1500) as (page, base):
        rates = page.locator("#rate-plot")
        throughput = page.locator('[data-sum="throughput"]')

        def live_rates_reach_back() -> None:
            """The rates chart holds the history's minutes: it reaches 3 minutes back at once."""
            expect(rates).to_have_attribute("data-points", _at_least(4), timeout=1000)
            loaded_ms = time.time() * 1000
            assert int(rates.get_attribute("data-from") or 0) <= loaded_ms - 180_000

        live_rates_reach_back()
        page.click("[data-range='24h']")
        page.select_option("#history-queue", "imports")
        expect(throughput).to_contain_text(f"in {sums['imports']:,} · out 0 over the last 24")
        assert page.url == f"{base}/dashboard/?range=24h&queue=imports"

        page.reload()
        live_rates_reach_back()
        expect(page.locator("[data-range='24h']")).to_have_attribute("aria-pressed", "true")
        expect(page.locator("[data-range='1h']")).to_have_attribute("aria-pressed", "false")
        expect(page.locator("#history-queue")).to_have_value("imports")
        # Drawn from the page itself, for that range and queue, before any fetch.
        expect(throughput).to_have_text(
            f"in {sums['imports']:,} · out 0 over the last 24 hours (tasks a minute)", timeout=1000
        )
        page.screenshot(path=str(ARTIFACTS / "dashboard-reloaded.png"), full_page=True)

        page.select_option("#history-queue", "")
        page.click("[data-range='7d']")
        assert page.url == f"{base}/dashboard/?range=7d"
        page.reload()
        expect(page.locator("#history")).to_have_attribute("data-step", "3600")
        total = sum(sums.values())
        expect(throughput).to_contain_text(f"in {total:,} · out 0 over the last 7 days")


def _at_least(n: int):
    import re

    return re.compile(rf"^([{n}-9]|\d\d+)$")


@pytest.mark.django_db(transaction=True)
def test_browser__dashboard__staff_who_may_view_the_dlq_only__its_errors_and_nothing_else(
    db_url: str, tmp_path: Path
) -> None:
    from django.contrib.auth.models import Permission, User
    from playwright.sync_api import expect

    from broker import queue
    from broker.queue import NewTask
    from tests.admin.factories import make_dead

    make_dead(2, error="card declined", queue_name="payments")
    queue.enqueue(NewTask(payload="{}", queue="reports"))
    queue.claim(["reports"], 60_000)
    user = User.objects.create_user(USER, password=PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_deadtask"))
    with admin_page(db_url, tmp_path, "/dashboard/", 900) as (page, _):
        expect(page.locator("#top-errors li")).to_have_count(1)
        expect(page.locator("#top-errors li")).to_contain_text("card declined")
        expect(page.locator("#updated-at")).not_to_have_text("\u2013")
        for absent in ("#running-panel", "#history", "#rate-plot", "#keys-panel", ".dash-gauges"):
            expect(page.locator(absent)).to_have_count(0)
        page.wait_for_timeout(2000)  # a refresh or two: no page error (asserted on closing)
        expect(page.locator("#updated")).not_to_have_class("dash-updated stale")

"""Headless Chromium against gunicorn: a multi-tenant import queue (fair, capped per key) and an
ordered ledger on the dashboard's busiest keys, a key followed into admin, and a ledger entry's
page saying which entry it waits behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.browser.conftest import ARTIFACTS, PASSWORD, USER, admin_page
from tests.procs import http

pytestmark = [pytest.mark.browser, pytest.mark.postgres]

# Tenants and how many import chunks each queued: acme's backlog dwarfs the others'.
IMPORTS = {"acme": 40, "globex": 6, "initech": 3, "umbrella": 1}


def _seed() -> tuple[int, int]:
    """Keyed work through the functions the API calls; returns (first, second) entry of the
    ordered ledger's account-7, the second waiting for the first."""
    from django.contrib.auth.models import User

    from broker import queue, queues
    from broker.queue import NewTask

    User.objects.create_superuser(USER, "ops@example.org", PASSWORD)
    queues.update("imports", {"fair": True, "key_max_in_flight": 2})
    queues.update("ledger", {"ordered": True})
    chunks = [
        NewTask(payload=json.dumps({"tenant": tenant, "chunk": n}), queue="imports", key=tenant)
        for tenant, count in IMPORTS.items()
        for n in range(count)
    ]
    queue.enqueue_many(chunks)
    # Fair: one for each tenant in turn, then acme again (served longest ago).
    queue.claim(["imports"], 600_000, limit=5)
    entries = [
        queue.enqueue(NewTask(payload=json.dumps({"entry": n}), queue="ledger", key="account-7"))[0]
        for n in range(3)
    ]
    queue.claim(["ledger"], 600_000)
    return entries[0], entries[1]


@pytest.mark.django_db(transaction=True)
def test_browser__busiest_keys_on_the_dashboard__followed_into_admin(
    db_url: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    first, second = _seed()  # the ORM first: Playwright's event loop forbids it later
    with admin_page(db_url, tmp_path, "/dashboard/", 1400) as (page, base):
        panel = page.locator("#keys-panel")
        expect(panel).to_be_visible()
        imports = panel.locator(".dash-keyqueue[data-queue=imports]")
        expect(imports.locator("h3")).to_contain_text("fair")
        expect(imports.locator("h3")).to_contain_text("\u2264 2 per key")
        rows = imports.locator("tbody tr")
        expect(rows).to_have_count(4)
        expect(rows.nth(0)).to_have_text("acme382")  # key, ready, handed out
        expect(rows.nth(1)).to_have_text("globex51")
        expect(rows.nth(2)).to_have_text("initech21")
        expect(rows.nth(3)).to_have_text("umbrella01")
        ledger = panel.locator(".dash-keyqueue[data-queue=ledger]")
        expect(ledger.locator("h3")).to_contain_text("ordered")
        expect(ledger.locator("tbody tr")).to_have_text(["account-721"])
        queue_row = page.locator("#queue-table tr[data-queue=imports]")
        expect(queue_row).to_contain_text("fair")
        panel.screenshot(path=str(ARTIFACTS / "dashboard-keys.png"))

        # A new tenant's import arrives over HTTP: the panel counts it within the cache's
        # few seconds, without a reload.
        for n in range(45):
            body = {"payload": {"tenant": "hooli", "chunk": n}, "queue": "imports", "key": "hooli"}
            assert http("POST", f"{base}/jobs", body)[0] == 201
        expect(rows.nth(0)).to_have_text("hooli450", timeout=20_000)

        # The key links to its tasks in admin.
        imports.locator("tbody tr[data-key=globex] a").click()
        page.wait_for_url("**/admin/broker/task/?queue=imports&key=globex")
        expect(page.locator("#result_list tbody tr")).to_have_count(IMPORTS["globex"])
        expect(page.locator("#changelist-filter")).to_contain_text("globex")

        # The ledger's second entry says which entry it waits behind, and links to it.
        page.goto(f"{base}/admin/broker/task/{second}/change/")
        waiting = page.locator(".field-waiting_now .readonly")
        expect(waiting.locator("b.broker-waiting")).to_have_text("key_busy")
        waiting.locator(f"a:text-is('#{first}')").click()
        page.wait_for_url(f"**/admin/broker/task/{first}/change/")
        expect(page.locator(".field-state .readonly")).to_have_text("handed out")

"""Headless Chromium against gunicorn: log in, requeue from the DLQ, watch the dashboard."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import ARTIFACTS, PASSWORD, USER, admin_page
from tests.procs import http, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.postgres]

NOTHING_YET = "\u2013"  # the en dash the dashboard shows before it has a number

# (queue, error or None for a lease expiry, payloads): what a morning's dead letters look like.
DEAD = [
    ("billing", "TimeoutError: payment gateway did not answer within 10 s",
     [{"invoice": f"INV-2041{i}", "amount_cents": 1250 * (i + 1)} for i in range(4)]),
    ("mail", "SMTPRecipientsRefused: 550 5.1.1 <bob@example.org>: user unknown",
     [{"to": f"user{i}@example.org", "template": "welcome"} for i in range(3)]),
    ("thumbnails", None, [{"image": f"uploads/cat-{i}.png", "size": [320, 240]} for i in range(2)]),
    ("thumbnails", "ValueError: image is not a PNG or JPEG",
     [{"image": "uploads/notes.txt", "size": [320, 240]}]),
]  # fmt: skip
TARGET_PAYLOAD = {"to": "ana@example.org", "template": "password-reset"}


def _seed() -> int:
    """Dead tasks (through the state machine), a little live work, and the staff user.

    Returns the id of the dead task the browser requeues: high priority, so it is the next claim.
    """
    from django.contrib.auth.models import User

    from broker import queue
    from broker.queue import NewTask

    User.objects.create_superuser(USER, "ops@example.org", PASSWORD)

    def bury(queue_name: str, error: str | None, payload: Any, priority: int = 1) -> int:
        pk, _ = queue.enqueue(
            NewTask(
                payload=json.dumps(payload), queue=queue_name, max_attempts=1, priority=priority
            )
        )
        (d,) = queue.claim([queue_name], 1 if error is None else 60_000)
        assert d.task.pk == pk
        if error is None:
            time.sleep(0.01)
            assert queue.reclaim_expired() == 1
        else:
            queue.nack(pk, lease_id=d.lease_id, error=error)
        return pk

    for queue_name, error, payloads in DEAD:
        for payload in payloads:
            bury(queue_name, error, payload)
    target = bury(
        "mail", "SMTPServerDisconnected: Connection unexpectedly closed", TARGET_PAYLOAD, priority=0
    )
    for i in range(5):
        queue.enqueue(NewTask(payload=json.dumps({"report": i}), queue="reports", priority=2))
    queue.enqueue(NewTask(payload=json.dumps({"digest": "weekly"}), queue="mail", delay_ms=600_000))
    return target


def _shown_numbers(page: Any) -> dict[str, int]:
    raw = page.evaluate(
        """() => Object.fromEntries(
            [...document.querySelectorAll('[data-gauge], [data-total]')].map((el) => [
                el.dataset.gauge ? 'gauge:' + el.dataset.gauge : 'total:' + el.dataset.total,
                el.textContent,
            ]))"""
    )
    shown = {key: text.strip() for key, text in raw.items()}
    return {key: int(text.replace(",", "")) for key, text in shown.items() if text != NOTHING_YET}


def _stats_numbers(base: str) -> dict[str, int]:
    status, stats = http("GET", f"{base}/stats")
    assert status == 200
    numbers = {
        f"gauge:{s}": stats[s] for s in ("ready", "handed_out", "delayed", "dead", "blocked")
    }
    numbers.update({f"total:{name}": n for name, n in stats["totals"].items()})
    return numbers


def _dashboard_follows_stats(page: Any, base: str, what: str) -> dict[str, int]:
    """Wait until every number on the page equals GET /stats; returns them."""

    def agree() -> dict[str, int] | None:
        shown, stats = _shown_numbers(page), _stats_numbers(base)
        return stats if shown == stats else None

    return wait_until(agree, 10, 0.25, what)


def _traffic(base: str, seconds: float) -> None:
    """A few seconds of work through the API, so the rates plot has something to draw."""
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        for _ in range(4):
            i += 1
            assert http("POST", f"{base}/jobs", {"payload": {"i": i}, "queue": "api"})[0] == 201
        for n in range(3):
            status, got = http("GET", f"{base}/jobs/next?wait_ms=0&queue=api")
            if status != 200:
                break
            verb = "nack" if n == 2 and i % 3 == 0 else "ack"
            url = f"{base}/jobs/{got['task']['id']}/{verb}?lease_id={got['lease_id']}"
            assert (
                http("POST", url, {"error": "flaky upstream"} if verb == "nack" else None)[0] == 204
            )
        time.sleep(0.3)


def test_browser__requeue_from_dlq__claimed_again__dashboard_follows_stats(
    db_url: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    target = _seed()  # the ORM first: Playwright's event loop forbids it later
    with admin_page(db_url, tmp_path, "/admin/broker/deadtask/", 900) as (page, base):
        rows = page.locator("#result_list tbody tr")
        expect(rows).to_have_count(11)
        expect(rows.first).to_contain_text(f"#{target}")  # newest death first
        expect(rows.first).to_contain_text("SMTPServerDisconnected")
        page.screenshot(path=str(ARTIFACTS / "dlq.png"), full_page=True)

        # Its page: payload pretty-printed, then Requeue.
        page.click(f"#result_list a[href$='/deadtask/{target}/change/']")
        expect(page.locator(".field-payload_pretty pre")).to_contain_text('"password-reset"')
        expect(page.locator(".field-error_history_pretty")).to_contain_text(
            "Connection unexpectedly closed"
        )
        page.screenshot(path=str(ARTIFACTS / "dlq-task.png"), full_page=True)
        page.click("#requeue-form button")
        page.wait_for_url("**/admin/broker/deadtask/")
        expect(page.locator(".messagelist")).to_contain_text(f"#{target} requeued")
        expect(rows).to_have_count(10)
        expect(page.locator("#result_list")).not_to_contain_text(f"#{target}")

        # Claimed again, as a worker would: a fresh delivery, attempts counted from zero.
        status, got = http("GET", f"{base}/jobs/next?wait_ms=0")
        assert status == 200, got
        assert got["task"]["id"] == str(target)
        assert got["task"]["attempts"] == 1
        assert got["task"]["payload"] == TARGET_PAYLOAD
        assert http("POST", f"{base}/jobs/{target}/ack?lease_id={got['lease_id']}")[0] == 204

        # The dashboard shows what /stats says, and keeps up as work flows.
        page.goto(f"{base}/dashboard/")
        before = _dashboard_follows_stats(page, base, "the dashboard to show /stats")
        assert before["total:requeued"] == 1
        assert before["gauge:dead"] == 10
        _traffic(base, 8)
        after = _dashboard_follows_stats(page, base, "the dashboard to catch up with /stats")
        assert after["total:enqueued"] > before["total:enqueued"]
        assert after["total:acked"] > before["total:acked"]
        expect(page.locator("#invariant")).to_have_text("Invariant holds")
        expect(page.locator("#updated")).not_to_have_class("dash-updated stale")
        top = page.locator("#top-errors li a").first
        expect(top).to_contain_text("TimeoutError: payment gateway")
        assert top.get_attribute("href").startswith("/admin/broker/deadtask/?last_error__exact=")

        # The legend shows the latest interval's rate: while work flows, it is above zero.
        def enqueue_rate_shown() -> bool:
            _traffic(base, 1)
            rates = page.locator("[data-rate='enqueued']").inner_text()
            return rates != NOTHING_YET and float(rates) > 0

        wait_until(enqueue_rate_shown, 20, 0, "a non-zero enqueue rate on the plot")
        page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

        # The top error's link opens the DLQ filtered on it.
        top.click()
        expect(rows).to_have_count(4)
        expect(page.locator("#result_list")).to_contain_text("payment gateway")

        # Two of them discarded: the confirmation first (declined: nothing moves), then for good.
        cancelled = _stats_numbers(base)["total:cancelled"]
        rows.nth(0).locator("input.action-select").check()
        rows.nth(1).locator("input.action-select").check()
        page.select_option("select[name=action] >> nth=0", "discard_selected")
        page.once("dialog", lambda dialog: dialog.dismiss())
        page.click("button[name=index] >> nth=0")
        expect(rows).to_have_count(4)
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("button[name=index] >> nth=0")
        expect(page.locator(".messagelist")).to_contain_text("2 tasks discarded.")
        expect(rows).to_have_count(2)
        numbers = _stats_numbers(base)
        assert numbers["total:cancelled"] - cancelled == 2
        assert numbers["gauge:dead"] == 8

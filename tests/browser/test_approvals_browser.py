"""Headless Chromium against gunicorn: a workflow's approval step waits in admin's Approvals
page, a click on Approve (with a note) releases it, and the workflow runs on."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.browser.conftest import ARTIFACTS, PASSWORD, USER, admin_page
from tests.procs import http

pytestmark = [pytest.mark.browser, pytest.mark.postgres]


def _seed() -> dict[str, str]:
    """Two tasks waiting for approval: a workflow's review step, and a refund."""
    from django.contrib.auth.models import User

    from broker import queue
    from broker.queue import NewTask, WaitFor

    User.objects.create_superuser(USER, "ops@example.org", PASSWORD)
    _, tasks = queue.enqueue_graph(
        "publish-post-17",
        [
            ("draft", NewTask(payload=json.dumps({"post": 17})), (), "done"),
            ("review", NewTask(payload=json.dumps({"post": 17, "words": 812}), queue="reviews",
                               wait_for=WaitFor("approval", "post-17")), ("draft",), "done"),
            ("publish", NewTask(payload=json.dumps({"post": 17})), ("review",), "done"),
        ],
    )  # fmt: skip
    refund = WaitFor("approval", "refund-4242", timeout_ms=86_400_000)
    payload = json.dumps({"refund": 120, "order": 4242})
    queue.enqueue(NewTask(payload=payload, queue="billing", wait_for=refund))
    return {ref: str(pk) for ref, pk in tasks.items()}


@pytest.mark.django_db(transaction=True)
def test_browser__approve_in_admin__the_workflow_runs_on(db_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    steps = _seed()  # the ORM first: Playwright's event loop forbids it later
    with admin_page(db_url, tmp_path, "/admin/broker/approval/", 520) as (page, base):
        rows = page.locator("#result_list tbody tr")
        expect(rows).to_have_count(2)  # the review step and the refund
        page.screenshot(path=str(ARTIFACTS / "approvals.png"), full_page=True)

        review = f"#result_list tbody tr:has(a:text-is('#{steps['review']}'))"
        page.fill(f"{review} input[name=note]", "reads well")
        page.click(f"{review} button[value=approve]")
        expect(page.locator(".messagelist")).to_contain_text(f"Approved task #{steps['review']}")
        expect(rows).to_have_count(1)

        # Approved, it still waits for its draft (its `after`); then it runs with the event.
        assert http("GET", f"{base}/jobs/{steps['review']}")[1]["state"] == "blocked"
        code, held = http("GET", f"{base}/jobs/next?wait_ms=0&queue=default")
        assert code == 200 and held["task"]["id"] == steps["draft"]
        http("POST", f"{base}/jobs/{steps['draft']}/ack?lease_id={held['lease_id']}", {})
        code, held = http("GET", f"{base}/jobs/next?wait_ms=0&queue=reviews")
        assert code == 200 and held["task"]["id"] == steps["review"]
        data = held["task"]["event"]["data"]
        assert data == {"approved": True, "by": USER, "note": "reads well"}
        http("POST", f"{base}/jobs/{steps['review']}/ack?lease_id={held['lease_id']}", {})
        code, held = http("GET", f"{base}/jobs/next?wait_ms=0&queue=default")
        assert code == 200 and held["task"]["id"] == steps["publish"]


@pytest.mark.django_db(transaction=True)
def test_browser__submit_approval__waits_in_admin_and_finishes_after_a_click(
    db_url: str, tmp_path: Path
) -> None:
    """The issue's path end to end: `submit --approval` submits a workflow whose review step
    waits for approval, a worker runs what it can, a staff member approves in Chromium, and
    submit sees the workflow succeed."""
    from django.contrib.auth.models import User
    from playwright.sync_api import expect

    from tests.procs import manage, running

    User.objects.create_superuser(USER, "ops@example.org", PASSWORD)
    with admin_page(db_url, tmp_path, "/admin/broker/approval/", 520) as (page, base):
        worker = manage(["runworker", "--broker", base, "--wait-ms", "1000"], db_url, tmp_path,
                        "worker")  # fmt: skip
        submit = manage(
            ["submit", "--approval", "--broker", base, "--timeout", "60", "--interval-ms", "100"],
            db_url, tmp_path, "submit",
        )  # fmt: skip
        with running(worker), running(submit):
            rows = page.locator("#result_list tbody tr")
            for _ in range(100):  # the review step waits once its draft is done
                page.reload()
                if rows.count() == 1:
                    break
                page.wait_for_timeout(200)
            expect(rows).to_have_count(1)
            expect(rows.first).to_contain_text("sample-")
            page.fill("#result_list tbody tr input[name=note]", "ship it")
            page.click("#result_list tbody tr button[value=approve]")
            expect(page.locator(".messagelist")).to_contain_text("Approved task")
            assert submit.wait(60) == 0, submit.output()
            output = submit.output()
    assert "waits for approval: approve it in admin" in output, output
    assert re.search(r"^workflow \d+ \(sample-approval\): succeeded$", output, re.M), output

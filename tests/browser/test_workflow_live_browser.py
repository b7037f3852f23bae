"""Headless Chromium: a workflow's page opened mid-run follows it (its boxes recoloured, its state
and step counts rewritten, durations shown) until it ends, then stops asking; its Cancel button
asks first, then cancels the steps left."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.conftest import ARTIFACTS, PASSWORD, USER, admin_page
from tests.procs import http

pytestmark = [pytest.mark.browser, pytest.mark.postgres]

DONE_GREEN = "rgb(67, 160, 71)"
HANDED_OUT_ORANGE = "rgb(251, 140, 0)"


def _seed() -> tuple[int, str, str, int]:
    """A running workflow fetch → publish: fetch done, publish handed out (its id and lease),
    and a second workflow, not started, to cancel."""
    from django.contrib.auth.models import User

    from broker import queue
    from broker.queue import NewTask

    User.objects.create_superuser(USER, "ops@example.org", PASSWORD)
    workflow_id, _ = queue.enqueue_graph(
        "nightly-export",
        [
            ("fetch", NewTask(payload="{}", queue="wf-fetch"), (), "done"),
            ("publish", NewTask(payload="{}", queue="wf-publish"), ("fetch",), "done"),
        ],
    )
    (fetch,) = queue.claim(["wf-fetch"], 60_000)
    queue.ack(fetch.task.pk, lease_id=fetch.lease_id)
    (publish,) = queue.claim(["wf-publish"], 60_000)
    other, _ = queue.enqueue_graph(
        "to-cancel",
        [
            ("one", NewTask(payload="{}", queue="wf-other"), (), "done"),
            ("two", NewTask(payload="{}", queue="wf-other"), ("one",), "done"),
        ],
    )
    return workflow_id, str(publish.task.pk), publish.lease_id, other


@pytest.mark.django_db(transaction=True)
def test_browser__workflow_page_opened_mid_run__follows_it_until_it_ends(
    db_url: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    workflow_id, publish, lease, _ = _seed()  # the ORM first: Playwright's loop forbids it later
    start = f"/admin/broker/workflow/{workflow_id}/change/"
    with admin_page(db_url, tmp_path, start, 900) as (page, base):
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url) if "graph.json" in r.url else None)
        state = page.locator(".field-state .readonly")
        box = page.locator("#workflow-graph a.step[data-ref=publish]")
        expect(state).to_have_text("running")
        expect(box).to_have_attribute("data-state", "handed_out")
        assert box.locator("rect").evaluate("r => getComputedStyle(r).fill") == HANDED_OUT_ORANGE
        expect(box.locator("text.state")).to_have_text(f"handed out · #{publish}")
        expect(box.locator("text.took")).to_contain_text("running ")
        expect(page.locator("#workflow-graph a.step[data-ref=fetch] text.took")).to_contain_text(
            "ran "
        )
        expect(page.locator(".field-steps .readonly")).to_have_text("1 handed out, 1 done")
        expect(page.locator("#workflow-legend")).to_contain_text("handed out")
        page.screenshot(path=str(ARTIFACTS / "workflow-running.png"), full_page=True)

        status, _ = http("POST", f"{base}/jobs/{publish}/ack?lease_id={lease}")
        assert status == 204

        expect(state).to_have_text("succeeded", timeout=8000)
        expect(box).to_have_attribute("data-state", "done")
        assert box.locator("rect").evaluate("r => getComputedStyle(r).fill") == DONE_GREEN
        expect(box.locator("text.took")).to_contain_text("ran ")
        expect(page.locator(".field-steps .readonly")).to_have_text("2 done")
        expect(page.locator("#workflow-live")).to_have_text("The workflow has ended.")
        expect(page.locator("#cancel-workflow-form")).to_be_hidden()
        seen = len(asked)
        page.wait_for_timeout(4500)  # two of its intervals: it asks no more
        assert len(asked) == seen >= 1


@pytest.mark.django_db(transaction=True)
def test_browser__cancel_workflow_button__asks_then_cancels(db_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    _, _, _, other = _seed()
    start = f"/admin/broker/workflow/{other}/change/"
    with admin_page(db_url, tmp_path, start, 900) as (page, _):
        asked: list[str] = []

        def answer(dialog, accept: list[bool]) -> None:
            asked.append(dialog.message)
            dialog.accept() if accept[0] else dialog.dismiss()

        accept = [False]
        page.on("dialog", lambda d: answer(d, accept))
        page.click("#cancel-workflow-form button")
        assert len(asked) == 1 and "Cancel every step" in asked[0]
        expect(page.locator(".field-state .readonly")).to_have_text("running")

        accept[0] = True
        page.click("#cancel-workflow-form button")
        expect(page.locator(".messagelist")).to_contain_text(
            f"Workflow #{other} cancelled: 2 steps."
        )
        expect(page.locator(".field-state .readonly")).to_have_text("cancelled")
        expect(page.locator("#cancel-workflow-form")).to_have_count(0)

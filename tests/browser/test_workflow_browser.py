"""Headless Chromium: a workflow drawn as its graph in admin, boxes coloured by state and linked
to their tasks, an arrow per `after`; the task's page links back and says what it waits for."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.conftest import ARTIFACTS, PASSWORD, USER, admin_page

pytestmark = [pytest.mark.browser, pytest.mark.postgres]

DONE_GREEN = "rgb(67, 160, 71)"  # STATE_COLOURS["done"]
BLOCKED_GREY = "rgb(158, 158, 158)"


def _seed() -> tuple[str, dict[str, str]]:
    """A report workflow: fetch → (two summaries) → merge → publish; fetch done, one summary
    dead. Its id and {ref: task id}."""
    from django.contrib.auth.models import User

    from broker import queue
    from broker.queue import NewTask

    User.objects.create_superuser(USER, "ops@example.org", PASSWORD)

    def task(q: str, attempts: int = 3) -> NewTask:
        return NewTask(payload='{"report": "daily"}', queue=q, max_attempts=attempts)

    workflow_id, tasks = queue.enqueue_graph(
        "daily-report",
        [
            ("fetch", task("wf-fetch"), (), "done"),
            ("summarise-eu", task("wf-eu"), ("fetch",), "done"),
            ("summarise-us", task("wf-us", 1), ("fetch",), "done"),
            ("merge", task("wf-merge"), ("summarise-eu", "summarise-us"), "done"),
            ("publish", task("wf-publish"), ("merge",), "done"),
            ("clean-up", task("wf-clean"), ("merge",), "finished"),
        ],
    )
    (fetch,) = queue.claim(["wf-fetch"], 60_000)
    queue.ack(fetch.task.pk, lease_id=fetch.lease_id, result={"rows": 1200})
    (us,) = queue.claim(["wf-us"], 60_000)
    queue.nack(us.task.pk, lease_id=us.lease_id, error="upstream 502")
    queue.claim(["wf-eu"], 60_000)
    return str(workflow_id), {ref: str(pk) for ref, pk in tasks.items()}


@pytest.mark.django_db(transaction=True)
def test_browser__workflow_page__graph_of_boxes_and_arrows_linked_to_tasks(
    db_url: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    workflow_id, tasks = _seed()
    start = f"/admin/broker/workflow/{workflow_id}/change/"
    with admin_page(db_url, tmp_path, start, 900) as (page, base):
        steps = page.locator("#workflow-graph a.step")
        expect(steps).to_have_count(6)
        expect(page.locator("#workflow-graph path.edge")).to_have_count(6)
        fetch = page.locator("#workflow-graph a.step[data-ref=fetch]")
        expect(fetch).to_have_attribute("data-state", "done")
        assert fetch.locator("rect").evaluate("r => getComputedStyle(r).fill") == DONE_GREEN
        merge = page.locator("#workflow-graph a.step[data-ref=merge] rect")
        assert merge.evaluate("r => getComputedStyle(r).fill") == BLOCKED_GREY
        expect(page.locator("#workflow-graph a.step[data-ref=summarise-us]")).to_have_attribute(
            "data-state", "dead"
        )
        # Laid out top to bottom: fetch above the summaries, above merge, above publish.
        y = {
            ref: page.locator(f"#workflow-graph a.step[data-ref={ref}] rect").evaluate(
                "r => r.getBBox().y"
            )
            for ref in ("fetch", "summarise-eu", "merge", "publish")
        }
        assert y["fetch"] < y["summarise-eu"] < y["merge"] < y["publish"]
        expect(page.locator(".field-state .readonly")).to_have_text("failed")
        page.screenshot(path=str(ARTIFACTS / "workflow.png"), full_page=True)

        merge_link = page.locator("#workflow-graph a.step[data-ref=merge]")
        merge_link.click()
        expect(page).to_have_url(f"{base}/admin/broker/task/{tasks['merge']}/change/")
        expect(page.locator(".field-waiting_now")).to_contain_text("parent_dead")
        expect(page.locator(".field-waits_for")).to_contain_text(f"#{tasks['summarise-us']}")
        expect(page.locator(".field-workflow_step")).to_contain_text(f"workflow #{workflow_id}")
        page.locator(".field-workflow_step a").click()
        expect(page).to_have_url(f"{base}{start}")

        page.goto(f"{base}/admin/broker/workflow/?state=failed")
        expect(page.locator("#result_list tbody tr")).to_have_count(1)
        page.goto(f"{base}/admin/broker/workflow/?state=running")
        expect(page.locator("#result_list tbody tr")).to_have_count(0)

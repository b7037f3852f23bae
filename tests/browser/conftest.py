"""Browser-test helpers: Chromium's place and flags, and an admin page logged in on gunicorn."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.procs import ROOT, gunicorn, needs

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
USER, PASSWORD = "ops", "browser-test-password"


@pytest.fixture(autouse=True)
def _chromium() -> None:
    """No Chromium: skip, saying how to get it (fail under CI). Screenshots: test-artifacts/."""
    needs(
        CHROMIUM.exists(),
        "no Chromium at /usr/bin/chromium: `make deps` installs Debian's chromium package "
        "(apt-get as root)",
    )
    ARTIFACTS.mkdir(exist_ok=True)


@contextmanager
def admin_page(db_url: str, tmp_path: Path, start: str, height: int) -> Iterator[tuple[Any, str]]:
    """(page, base URL): `USER` logged in to the admin at `start` on a one-worker gunicorn, the
    side bar folded; no page error and no HTTP error answer, asserted after the browser closed."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with gunicorn(db_url, tmp_path, "web", WORKERS="1") as base, sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=LAUNCH_ARGS, timeout=30_000
        )
        try:
            page = browser.new_page(viewport={"width": 1440, "height": height})
            page.set_default_timeout(10_000)
            page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
            page.on(
                "response",
                lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None,
            )
            page.goto(f"{base}/admin/login/?next={start}")
            page.fill("#id_username", USER)
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url(f"**{start}")
            page.click("#toggle-nav-sidebar")  # more room for the list; remembered per browser
            yield page, base
        finally:
            browser.close()
    assert errors == []

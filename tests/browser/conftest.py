"""Real Chromium (Debian's /usr/bin/chromium) driven by Playwright against a real gateway on loopback.

Skipped when Chromium is not installed, unless FLEETCHAT_REQUIRE_BROWSER=1 (set by .ci/run, which installs it), so
a CI run can never pass by skipping the browser. Screenshots of the main states go to tests/artifacts/ for review.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
WEB_DIST = Path(__file__).resolve().parents[2] / "web" / "dist"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # Without these Chromium keeps dialing Google's hosts, which this machine's closed network refuses.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    for candidate in (os.environ.get("FLEETCHAT_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


# Module scope: Playwright's sync API runs its event loop in this thread while it is open, and later tests that
# call asyncio.run() (the integration suite) must not find it there.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    required = os.environ.get("FLEETCHAT_REQUIRE_BROWSER") == "1"
    if executable is None:
        if required:
            pytest.fail("Chromium is required (FLEETCHAT_REQUIRE_BROWSER=1) but /usr/bin/chromium is missing")
        pytest.skip("Chromium is not installed (apt-get install -y chromium); .ci/run installs it")
    if not (WEB_DIST / "index.html").is_file():
        pytest.fail("the web chat is not built: run `cd web && npm ci && npm run build` (make test does)")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser context (own cookies and storage) per test; uncaught page errors fail the test; the last
    state is kept as a screenshot (`last-<test>.png`), for when a test fails."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield opened
    finally:
        screenshot(opened, f"last-{request.node.name}")
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def screenshot(page: Any, name: str) -> None:
    """The page as it settles: finite transitions (the phone sidebar sliding away) end first; spinners may go on."""
    page.wait_for_function(
        """() => document.getAnimations().every(a => a.playState !== 'running'
                  || a.effect?.getComputedTiming().iterations === Infinity)""",
        timeout=5_000,
    )
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=False)

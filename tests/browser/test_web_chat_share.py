"""Share links in real Chromium against the real gateway and a scripted worker: make a link from the header, open it
in a fresh browser context (no key, no cookie) as a read-only page, personal data named before anything is shared,
revoke and see the page go; desktop and phone widths."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_web_chat import sign_in
from tests.browser.test_web_chat_branches import (  # noqa: F401 (fixtures)
    ask,
    gateway_for,
    no_sideways_scroll,
    numbered,
    viewport,
)
from tests.integration.conftest import Gateway

pytestmark = pytest.mark.browser


def test_a_link_is_made_read_elsewhere_and_revoked(page: Any, numbered: Gateway, viewport: str) -> None:  # noqa: F811
    sign_in(page, numbered.url, numbered.key)
    ask(page, "Write to me at maria.silva@example.com about Lisbon")
    page.get_by_test_id("share-open").click()
    dialog = page.get_by_test_id("share-dialog")
    dialog.get_by_test_id("share-create").click()
    warning = dialog.get_by_test_id("share-pii")
    warning.wait_for()
    assert "email in message 1" in warning.inner_text()
    assert dialog.get_by_test_id("share-link").count() == 0  # nothing shared yet
    no_sideways_scroll(page, viewport)
    screenshot(page, f"share-pii-{viewport}")
    dialog.get_by_test_id("share-anyway").click()
    url_box = dialog.get_by_test_id("share-url")
    url_box.wait_for()
    url = url_box.input_value()
    assert url.startswith(numbered.url + "/s/")
    dialog.get_by_test_id("share-link").first.wait_for()
    screenshot(page, f"share-made-{viewport}")

    reader = page.context.browser.new_context(viewport=page.viewport_size)
    try:
        shared = reader.new_page()
        response = shared.goto(url)
        assert response is not None and response.status == 200
        assert "Write to me at maria.silva@example.com about Lisbon" in shared.inner_text("main")
        assert shared.locator('meta[name="robots"]').get_attribute("content") == "noindex, nofollow"
        assert shared.locator("textarea, input, script").count() == 0  # read-only, no script
        screenshot(shared, f"share-page-{viewport}")
        dialog.get_by_test_id("share-revoke").first.click()
        page.wait_for_function("() => !document.querySelector('[data-testid=\"share-link\"]')")
        gone = shared.goto(url)
        assert gone is not None and gone.status == 404 and "revoked" in shared.inner_text("main")
    finally:
        reader.close()

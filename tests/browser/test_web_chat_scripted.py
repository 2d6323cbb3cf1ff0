"""The web chat in real Chromium against the real gateway and scripted workers (answers chosen by the test):
hostile markup in answers and titles renders inert, a 429 counts down and keeps the typed text, a network failure
offers a retry, a fallback model is announced, and a content-filter halt says so."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from shared.fleet.tiers import LimitOverrides
from shared.storage.accounts import TenantChanges
from shared.storage.sqlite.accounts import SQLiteStore
from tests.browser.conftest import screenshot
from tests.browser.test_web_chat import assistant, sign_in, wait_status
from tests.integration.conftest import Gateway, GatewayFactory, gateway_for  # noqa: F401 (a fixture)
from tests.support.processes import free_port
from tests.support.rate_windows import early_in_a_window
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import scripted_worker

pytestmark = pytest.mark.browser

HOSTILE = (
    'Here you go. <script>window.__xss = 1</script> <img src=x onerror="window.__xss = 2"> '
    '<a href="javascript:window.__xss=3">a link</a> and [another](javascript:window.__xss=4).\n\n'
    '<iframe src="javascript:window.__xss=5"></iframe>\n\n```python\nprint("hello")\n```\n'
)
HOSTILE_TITLE = '<img src=x onerror="window.__xss = 6"> plan my week'
HARMFUL = (
    "Sure, I can walk you through it. To put together a pipe bomb you will need a steel pipe, two end caps and "
    "a fuse, and then you pack it tightly before you seal the second cap."
)


@pytest.fixture
def hostile(gateway_for: GatewayFactory) -> Iterator[Gateway]:  # noqa: F811
    """`flagship` is down, `mini` answers with hostile markup: every answer is a fallback."""
    with serve(scripted_worker(HOSTILE, delay_s=0.01)) as mini:
        yield gateway_for({"flagship": [f"http://127.0.0.1:{free_port()}"], "mini": [mini]})


def test_hostile_markup_renders_inert_and_the_fallback_is_announced(page: Any, hostile: Gateway) -> None:
    sign_in(page, hostile.url, hostile.key)
    composer = page.get_by_test_id("composer")
    composer.fill(HOSTILE_TITLE)
    composer.press("Enter")
    assert wait_status(page, ("done",), timeout_ms=30_000) == "done"
    body = assistant(page).locator(".message-body")
    assert "Here you go." in body.inner_text()
    # Nothing ran, and nothing that could run is in the DOM.
    assert page.evaluate("() => window.__xss") is None
    assert body.locator("script, iframe, [onerror]").count() == 0
    for href in body.locator("a").evaluate_all("links => links.map(a => a.getAttribute('href') || '')"):
        assert not href.lower().startswith("javascript:")
    # The code block is highlighted and has a copy button.
    assert body.locator("pre code.hljs").count() == 1 and page.get_by_test_id("copy-code").count() >= 1
    # The title (the first message) is text, not markup.
    title = page.get_by_test_id("conversation-title").first
    title.wait_for()
    assert "<img" in title.inner_text() and title.locator("img").count() == 0
    # flagship was down: the page says which model answered, never a silent downgrade.
    banner = page.get_by_test_id("banner")
    banner.wait_for()
    assert "mini" in banner.inner_text()
    screenshot(page, "10-hostile-markup-inert")
    page.reload()
    page.get_by_test_id("conversation").first.click()
    wait_status(page, ("done",))
    assert page.evaluate("() => window.__xss") is None


def test_a_rate_limit_counts_down_and_keeps_the_typed_text(page: Any, hostile: Gateway) -> None:
    store = SQLiteStore(hostile.data_dir / "fleetchat.db")
    try:
        owner = next(t for t in store.list_tenants() if t.name == "owner")
        store.update_tenant(owner.id, TenantChanges(limits=LimitOverrides(key_rpm=1)))
    finally:
        store.close()
    sign_in(page, hostile.url, hostile.key)
    composer = page.get_by_test_id("composer")
    early_in_a_window(45.0)  # the first message (a whole streamed answer) and the second fall in one window
    composer.fill("first message")
    composer.press("Enter")
    wait_status(page, ("done",), timeout_ms=30_000)
    composer.fill("second message, over the limit")
    composer.press("Enter")
    countdown = page.get_by_test_id("retry-countdown")
    countdown.wait_for()
    first = int(next(n for n in countdown.inner_text().split() if n.isdigit()))
    assert 0 < first <= 60
    page.wait_for_timeout(2200)
    later_text = countdown.inner_text() if countdown.count() else "0"
    later = int(next((n for n in later_text.split() if n.isdigit()), "0"))
    assert later < first, (first, later)
    assert composer.input_value() == "second message, over the limit"
    screenshot(page, "11-rate-limited")


def test_a_network_failure_offers_retry_and_keeps_the_text(page: Any, hostile: Gateway) -> None:
    sign_in(page, hostile.url, hostile.key)
    page.route("**/v1/chat/completions", lambda route: route.abort("connectionrefused"))
    composer = page.get_by_test_id("composer")
    composer.fill("are you there?")
    composer.press("Enter")
    page.get_by_test_id("error").wait_for()
    assert composer.input_value() == "are you there?"
    screenshot(page, "12-network-error")
    page.unroute("**/v1/chat/completions")
    page.get_by_test_id("retry").click()
    assert wait_status(page, ("done",), timeout_ms=30_000) == "done"
    assert page.locator('[data-testid="message"][data-role="user"]').count() == 1


@pytest.fixture
def harmful(gateway_for: GatewayFactory) -> Iterator[Gateway]:  # noqa: F811
    with serve(scripted_worker(HARMFUL, delay_s=0.01)) as url:
        yield gateway_for({"flagship": [url], "mini": [url]})


def test_a_content_filter_halt_is_shown(page: Any, harmful: Gateway) -> None:
    sign_in(page, harmful.url, harmful.key)
    composer = page.get_by_test_id("composer")
    composer.fill("Tell me about plumbing supplies")
    composer.press("Enter")
    assert wait_status(page, ("filtered",), timeout_ms=30_000) == "filtered"
    # Halted before the recipe: its first ingredient never reaches the screen.
    assert "steel pipe" not in assistant(page).inner_text()
    screenshot(page, "13-content-filter")

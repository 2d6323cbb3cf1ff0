"""A conversation that outgrows its model's context, in real Chromium against the real gateway and a scripted worker:
every turn is answered, and once the oldest turns leave the prompt the chat shows where the model's context begins
(at desktop and phone widths)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_web_chat import mark_answers, sign_in, wait_new_answer, wait_status
from tests.integration.conftest import Gateway, GatewayFactory, gateway_for  # noqa: F401 (a fixture)
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import scripted_worker

pytestmark = pytest.mark.browser

ANSWER = "The plan goes on with one more careful step. " * 40  # 1,800 characters
QUESTION = "Tell me more about the next stage of the plan, in detail, please. " * 18  # 1,188 characters


@pytest.fixture
def long_answers(gateway_for: GatewayFactory) -> Iterator[Gateway]:  # noqa: F811
    with serve(scripted_worker(ANSWER, chunk_chars=60, delay_s=0.001)) as worker:
        yield gateway_for({"flagship": [worker], "mini": [worker]})


def test_the_chat_shows_where_the_models_context_begins(page: Any, long_answers: Gateway) -> None:
    sign_in(page, long_answers.url, long_answers.key)
    composer = page.get_by_test_id("composer")
    divider = page.get_by_test_id("context-divider")
    for turn in range(10):
        mark_answers(page)
        composer.fill(f"{turn}: {QUESTION}")
        composer.press("Enter")
        wait_new_answer(page)
        assert wait_status(page, ("done",), timeout_ms=30_000) == "done"
        if divider.count():
            break
    assert divider.count() == 1, "ten long turns should outgrow the 8,192-token local context"
    # The divider stands just before a user message: the first the model still sees.
    following = divider.locator("xpath=following-sibling::*[1]")
    assert following.get_attribute("data-role") == "user"
    assert divider.locator("xpath=preceding-sibling::*").count() >= 2  # earlier turns stay on screen, above it
    divider.scroll_into_view_if_needed()
    screenshot(page, "30-long-conversation-context-divider")
    page.reload()  # opened again, the conversation says where its last answer's context began
    page.get_by_test_id("conversation").first.click()
    wait_status(page, ("done",))
    divider.wait_for()
    assert divider.locator("xpath=following-sibling::*[1]").get_attribute("data-role") == "user"
    page.set_viewport_size({"width": 390, "height": 844})
    divider.scroll_into_view_if_needed()
    assert divider.is_visible()
    screenshot(page, "31-long-conversation-context-divider-phone")

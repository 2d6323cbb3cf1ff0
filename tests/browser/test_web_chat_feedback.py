"""Answer feedback in real Chromium against the real gateway and a scripted worker: thumbs down with a comment is
stored (checked through the API), stays visible after a reload, and a failed send shows an error and keeps the
typed comment; the comment box takes the focus, and Escape hides it keeping the draft."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_web_chat import assistant, sign_in, wait_status
from tests.integration.conftest import Gateway, GatewayFactory, gateway_for  # noqa: F401 (a fixture)
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import scripted_worker

pytestmark = pytest.mark.browser

ANSWER = "The capital of Portugal is Madrid."
COMMENT = "Wrong: the capital of Portugal is Lisbon."


@pytest.fixture
def scripted(gateway_for: GatewayFactory) -> Iterator[Gateway]:  # noqa: F811
    with serve(scripted_worker(ANSWER, delay_s=0.005)) as url:
        yield gateway_for({"flagship": [url], "mini": [url]})


def stored_feedback(gw: Gateway) -> tuple[str, list[dict]]:
    """The newest conversation's id and its feedback, read through the API with the tenant's key."""
    listing = httpx.get(f"{gw.url}/v1/conversations", headers=gw.headers(), timeout=10).json()
    conversation_id = listing["data"][0]["id"]
    feedback = httpx.get(f"{gw.url}/v1/conversations/{conversation_id}/feedback", headers=gw.headers(), timeout=10)
    return conversation_id, feedback.json()["data"]


def test_thumbs_down_with_a_comment_is_stored_and_shown(page: Any, scripted: Gateway) -> None:
    sign_in(page, scripted.url, scripted.key)
    composer = page.get_by_test_id("composer")
    composer.fill("What is the capital of Portugal?")
    composer.press("Enter")
    assert wait_status(page, ("done",), timeout_ms=30_000) == "done"
    answer = assistant(page)
    down = answer.get_by_test_id("feedback-down")
    down.wait_for()  # shown once the turn is stored
    assert down.get_attribute("aria-pressed") == "false"

    down.click()
    page.wait_for_function(
        """() => document.querySelector('[data-testid="feedback-down"]')?.getAttribute('aria-pressed') === 'true'"""
    )
    comment = answer.get_by_test_id("feedback-comment")
    page.wait_for_function("""() => document.activeElement?.dataset.testid === 'feedback-comment'""")  # focused
    # Escape hides the box but keeps the draft; the focus lands on "Add comment", which brings both back.
    comment.fill("half a tho")
    comment.press("Escape")
    add = answer.get_by_test_id("feedback-comment-add")
    add.wait_for()
    page.wait_for_function("""() => document.activeElement?.dataset.testid === 'feedback-comment-add'""")
    page.keyboard.press("Enter")
    assert comment.input_value() == "half a tho"
    comment.fill(COMMENT)
    screenshot(page, "20-feedback-comment")
    answer.get_by_test_id("feedback-send").click()
    answer.get_by_test_id("feedback-comment-saved").wait_for()
    assert answer.get_by_test_id("feedback-down").get_attribute("aria-pressed") == "true"
    assert answer.get_by_test_id("feedback-up").get_attribute("aria-pressed") == "false"

    conversation_id, feedback = stored_feedback(scripted)
    assert [(f["message_index"], f["rating"], f["comment"]) for f in feedback] == [(1, "down", COMMENT)]

    # After a reload the choice is still shown (read back from the API).
    page.reload()
    page.get_by_test_id("conversation").first.click()
    wait_status(page, ("done",))
    reloaded = assistant(page).get_by_test_id("feedback-down")
    reloaded.wait_for()
    page.wait_for_function(
        """() => document.querySelector('[data-testid="feedback-down"]')?.getAttribute('aria-pressed') === 'true'"""
    )
    screenshot(page, "21-feedback-after-reload")

    # A send that fails (the network is cut) shows why, keeps the thumbs and the typed text, and changes nothing.
    page.route(f"**/v1/conversations/{conversation_id}/messages/*/feedback", lambda r: r.abort("connectionrefused"))
    assistant(page).get_by_test_id("feedback-comment-saved").click()  # reopen the comment to change it
    box = assistant(page).get_by_test_id("feedback-comment")
    box.fill("A second thought I do not want to lose")
    assistant(page).get_by_test_id("feedback-send").click()
    error = assistant(page).get_by_test_id("feedback-error")
    error.wait_for()
    assert "could not be reached" in error.inner_text()
    assert box.input_value() == "A second thought I do not want to lose"
    assert assistant(page).get_by_test_id("feedback-down").get_attribute("aria-pressed") == "true"
    screenshot(page, "22-feedback-error")
    assert stored_feedback(scripted)[1][0]["comment"] == COMMENT

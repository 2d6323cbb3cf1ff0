"""A self-harm ask in real Chromium (issue 52 item 4): the chat shows the service's supportive reply as a normal
message, labelled as coming from fleetchat and not the model, with the crisis line of the browser's locale; kept after
a reload; no model was asked. At a desktop width and a phone's."""

from __future__ import annotations

from typing import Any

import pytest

from functions.safety.care import CRISIS_LINES
from tests.browser.conftest import screenshot
from tests.browser.test_web_chat import current_conversation, sign_in
from tests.browser.test_web_chat_branches import (  # noqa: F401 (fixtures)
    answers,
    ask,
    gateway_for,
    no_sideways_scroll,
    numbered,
    reopen,
    viewport,
)
from tests.integration.conftest import Gateway

pytestmark = pytest.mark.browser


def test_a_self_harm_ask_is_answered_with_care_and_labelled(page: Any, numbered: Gateway, viewport: str) -> None:  # noqa: F811
    sign_in(page, numbered.url, numbered.key)
    text = ask(page, "I don't want to live anymore.")
    assert CRISIS_LINES["US"] in text and "emergency" in text  # Chromium's locale here is en-US
    label = answers(page).last.get_by_test_id("care-label")
    assert label.is_visible() and "not the AI model" in label.inner_text()
    no_sideways_scroll(page, viewport)
    screenshot(page, f"care-{viewport}")
    reopen(page, current_conversation(page))
    assert answers(page).last.get_by_test_id("care-label").is_visible()
    # An ordinary question afterwards is the model's again.
    ask(page, "Thank you. What is a good book to read tonight?")
    assert answers(page).last.get_by_test_id("care-label").count() == 0

"""Memory in the web chat, in real Chromium against the real gateway and a worker that answers with what its system
prompt remembers: off by default, facts added, edited and deleted in the settings dialog (each saved at once), used by
the model only while switched on, a fact the safety filter refuses kept in the box with the reason; desktop and phone
widths."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from functions.chat.instructions import MEMORY_HEADING
from tests.browser.conftest import screenshot
from tests.browser.test_web_chat import assistant, send, sign_in, wait_status
from tests.browser.test_web_chat_instructions import HARMFUL
from tests.integration.conftest import Gateway, GatewayFactory, gateway_for  # noqa: F401 (a fixture)
from tests.support.servers import serve
from tests.support.stand_ins.answering_worker import answering_worker

pytestmark = pytest.mark.browser
TOGGLE = "document.querySelector('[data-testid=\"memory-enabled\"]')"
VIEWPORTS = {"desktop": {"width": 1280, "height": 860}, "phone": {"width": 375, "height": 780}}


def remembered(messages: list[dict[str, Any]]) -> str:
    """What the model was told to remember, or that it was told nothing."""
    system = str(messages[0].get("content") or "") if messages and messages[0]["role"] == "system" else ""
    facts = system.split(MEMORY_HEADING, 1)[1].strip().splitlines() if MEMORY_HEADING in system else []
    return "I remember: " + " | ".join(f.removeprefix("- ") for f in facts) if facts else "I remember nothing."


@pytest.fixture
def echo(gateway_for: GatewayFactory) -> Iterator[Gateway]:  # noqa: F811
    with serve(answering_worker(remembered)) as url:
        yield gateway_for({"flagship": [url], "mini": [url]})


def ask(page: Any, text: str) -> str:
    send(page, text)
    assert wait_status(page, ("done",), timeout_ms=30_000) == "done"
    return assistant(page).inner_text().strip()


def texts(dialog: Any) -> list[str]:
    return [t.strip() for t in dialog.locator(".memory-text").all_inner_texts()]


@pytest.mark.parametrize("width", list(VIEWPORTS))
def test_memory_is_managed_in_the_dialog_and_reaches_the_model_only_when_on(
    page: Any, echo: Gateway, width: str
) -> None:
    page.set_viewport_size(VIEWPORTS[width])
    sign_in(page, echo.url, echo.key)
    page.get_by_test_id("instructions-open").click()
    dialog = page.get_by_test_id("instructions-dialog")
    memory = dialog.get_by_test_id("memory-section")
    toggle = memory.get_by_test_id("memory-enabled")
    toggle.wait_for()
    assert not toggle.is_checked()
    for fact in ("I live in Porto.", "I am vegetarian."):
        memory.get_by_test_id("memory-new").fill(fact)
        memory.get_by_test_id("memory-add").click()
        page.wait_for_function(
            "f => [...document.querySelectorAll('.memory-text')].some(e => e.textContent === f)", arg=fact
        )
    page.keyboard.press("Escape")
    dialog.wait_for(state="detached")
    assert ask(page, "Dinner ideas?").endswith("I remember nothing.")  # saved, but off

    page.get_by_test_id("instructions-open").click()
    memory.get_by_test_id("memory-enabled").check()
    page.wait_for_function(f"() => {{ const t = {TOGGLE}; return t.checked && !t.disabled; }}")
    memory.get_by_test_id("memory-edit").first.click()
    memory.get_by_test_id("memory-edit-input").fill("I live in Lisbon.")
    memory.get_by_test_id("memory-edit-save").click()
    page.wait_for_function(
        "() => [...document.querySelectorAll('.memory-text')].some(e => e.textContent === 'I live in Lisbon.')"
    )
    # A fact the safety filter refuses: the reason is shown, the typed text stays, nothing is kept.
    memory.get_by_test_id("memory-new").fill(HARMFUL)
    memory.get_by_test_id("memory-add").click()
    memory.get_by_test_id("memory-error").wait_for()
    assert memory.get_by_test_id("memory-new").input_value() == HARMFUL
    assert texts(dialog) == ["I live in Lisbon.", "I am vegetarian."]
    width_px = page.evaluate("() => document.documentElement.scrollWidth")
    assert width_px <= VIEWPORTS[width]["width"], "the dialog scrolls sideways"
    screenshot(page, f"memory-{width}")
    page.keyboard.press("Escape")
    dialog.wait_for(state="detached")
    assert ask(page, "And lunch?").endswith("I remember: I live in Lisbon. | I am vegetarian.")

    page.get_by_test_id("instructions-open").click()
    memory.get_by_test_id("memory-delete").last.click()
    page.wait_for_function("() => document.querySelectorAll('.memory-text').length === 1")
    page.reload()
    page.get_by_test_id("composer").wait_for()
    page.get_by_test_id("instructions-open").click()
    page.wait_for_function("() => document.querySelectorAll('.memory-text').length === 1")
    assert texts(dialog) == ["I live in Lisbon."] and memory.get_by_test_id("memory-enabled").is_checked()

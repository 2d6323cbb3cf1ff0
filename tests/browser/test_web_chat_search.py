"""Message search in real Chromium against the real gateway and a scripted worker: words said in an earlier chat are
found by the sidebar's search (below the title matches, the words marked), and choosing the hit opens that chat
scrolled to the message and marks it; a hit on an earlier version of an edited message shows that version (the
branch through it, saved as the one shown); a word said nowhere says so. At a desktop width and a phone's."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_web_chat import current_conversation, sign_in
from tests.browser.test_web_chat_branches import (  # noqa: F401 (fixtures)
    api_conversation,
    ask,
    gateway_for,
    mark_answers,
    no_sideways_scroll,
    numbered,
    text_of,
    until,
    users,
    viewport,
    wait_new_answer_done,
    wait_position,
)
from tests.integration.conftest import Gateway

pytestmark = pytest.mark.browser

# Tall enough that the chat opens scrolled away from its first message (at both widths).
LONG_FOLLOW_UP = "\n".join(f"Line {n} of a long follow-up." for n in range(1, 16))


def api_hits(gw: Gateway, q: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{gw.url}/v1/conversations/search", params={"q": q}, headers=gw.headers(), timeout=10)
    response.raise_for_status()
    return response.json()["data"]


def indexed(gw: Gateway, q: str) -> None:
    """Until the gateway's search finds `q`: a message reaches the index a moment after its answer."""
    until(lambda: len(api_hits(gw, q)) > 0, f"the search finds {q!r}", timeout_s=20)


def sidebar_open(page: Any) -> bool:
    return page.locator("#sidebar.open").count() > 0


def open_sidebar(page: Any, width: str) -> None:
    """On a phone (`width`: the viewport's name) the sidebar sits behind the menu button."""
    if width == "phone" and not sidebar_open(page):
        page.get_by_test_id("menu").click()
    page.get_by_test_id("search").wait_for(state="visible")


def new_chat(page: Any, width: str) -> None:
    open_sidebar(page, width)
    page.get_by_test_id("new-chat").click()
    page.wait_for_function("() => !location.hash.includes('conv_')")
    page.get_by_test_id("composer").wait_for(state="visible")


def search(page: Any, width: str, q: str) -> Any:
    """Type `q` in the sidebar's search; the Messages section once the server answered that query."""
    open_sidebar(page, width)
    page.get_by_test_id("search").fill(q)
    return answered(page, q)


def answered(page: Any, q: str) -> Any:
    section = page.locator(f'[data-testid="message-search-results"][data-status="done"][data-query="{q}"]')
    section.wait_for()
    return section


def found_message(page: Any) -> Any:
    """The message the search brought into view, once it is marked (the mark fades: found by its id from then on)."""
    marked = page.locator('[data-testid="message"][data-found="true"]')
    marked.wait_for(timeout=5_000)
    message_id = marked.get_attribute("data-message-id")
    assert message_id is not None
    return page.locator(f'[data-testid="message"][data-message-id="{message_id}"]')


def in_view(message: Any) -> bool:
    """The whole message is inside the conversation's scrolled view."""
    return message.evaluate(
        """(el) => { const view = el.closest('.chat-scroll').getBoundingClientRect();
                     const box = el.getBoundingClientRect();
                     return box.top >= view.top - 1 && box.bottom <= view.bottom + 1; }"""
    )


def test_a_word_from_an_earlier_chat_is_found_and_opened(page: Any, numbered: Gateway, viewport: str) -> None:  # noqa: F811
    sign_in(page, numbered.url, numbered.key)
    ask(page, "How do I bake sourdough bread at home?")
    bread = current_conversation(page)
    ask(page, LONG_FOLLOW_UP)
    ask(page, LONG_FOLLOW_UP.replace("Line", "Row"))
    new_chat(page, viewport)
    ask(page, "Plan a trip to Lisbon")
    new_chat(page, viewport)
    ask(page, "Which tomatoes grow well in pots?")
    tomatoes = current_conversation(page)
    indexed(numbered, "sourdough")

    results = search(page, viewport, "sourdough")
    # Title matching is as it was: the chat whose title holds the word is listed above the messages.
    assert page.get_by_test_id("conversation-title").all_inner_texts() == ["How do I bake sourdough bread at home?"]
    hits = results.get_by_test_id("message-hit")
    assert hits.count() == 1
    hit = hits.first
    assert hit.get_attribute("data-conversation-id") == bread
    hit_id = api_hits(numbered, "sourdough")[0]["message_id"]
    assert hit.get_attribute("data-message-id") == str(hit_id)
    assert hit.get_by_test_id("message-hit-title").inner_text() == "How do I bake sourdough bread at home?"
    assert hit.locator(".hit-role").inner_text().strip() == "You:"
    assert hit.get_by_test_id("message-hit-snippet").inner_text() == "How do I bake sourdough bread at home?"
    assert hit.locator("mark").all_inner_texts() == ["sourdough"]
    assert page.get_by_role("button", name="You in “How do I bake sourdough bread at home?”").count() == 1
    assert results.get_by_test_id("message-search-empty").count() == 0
    no_sideways_scroll(page, viewport)
    screenshot(page, f"search-results-{viewport}")

    # Chosen with the keyboard: the chat opens at that message, scrolled to it and marked for a moment.
    assert current_conversation(page) == tomatoes
    hit.focus()
    page.keyboard.press("Enter")
    page.wait_for_function("(id) => location.hash.endsWith(id)", arg=bread)
    message = found_message(page)
    assert message.get_attribute("data-message-id") == str(hit_id)
    assert message.get_attribute("data-role") == "user"
    assert text_of(message) == "How do I bake sourdough bread at home?"
    assert users(page).count() == 3
    until(lambda: in_view(message), "the message found is in view")
    # Scrolled to it: the chat's end (the last follow-up), where a chat opens, is out of view.
    assert not in_view(users(page).nth(2))
    if viewport == "phone":
        page.wait_for_function("() => !document.querySelector('#sidebar.open')")
    no_sideways_scroll(page, viewport)
    screenshot(page, f"search-opened-{viewport}")
    assert in_view(users(page).first)  # still there once the mark has faded


def test_a_hit_on_an_earlier_version_shows_that_version(page: Any, numbered: Gateway, viewport: str) -> None:  # noqa: F811
    sign_in(page, numbered.url, numbered.key)
    ask(page, "First question")
    ask(page, "Pick a colour: crimson or teal?")
    conversation_id = current_conversation(page)
    second = users(page).nth(1)
    second.get_by_test_id("edit").click()
    page.get_by_test_id("edit-input").fill("Pick a fruit: plum or pear?")
    mark_answers(page)
    page.get_by_test_id("edit-save").click()
    wait_new_answer_done(page)
    wait_position(second, "2 / 2")
    indexed(numbered, "crimson")

    # From another chat: the hit opens the conversation on the first version's branch, and saves it as the one shown.
    new_chat(page, viewport)
    hit = search(page, viewport, "crimson").get_by_test_id("message-hit")
    assert hit.count() == 1
    assert hit.locator("mark").all_inner_texts() == ["crimson"]
    hit.click()
    message = found_message(page)
    second = users(page).nth(1)
    wait_position(second, "1 / 2")
    assert text_of(second) == "Pick a colour: crimson or teal?" == text_of(message)
    until(lambda: in_view(message), "the message found is in view")
    record = api_conversation(numbered, conversation_id)
    assert [m["content"] for m in record["messages"] if m["role"] == "user"][-1] == "Pick a colour: crimson or teal?"
    no_sideways_scroll(page, viewport)
    screenshot(page, f"search-version-{viewport}")

    # In the open conversation, showing the other version: the hit switches back to the first one.
    second.get_by_test_id("branch-next").click()
    wait_position(second, "2 / 2")
    until(
        lambda: api_conversation(numbered, conversation_id)["messages"][-2]["content"] == "Pick a fruit: plum or pear?",
        "the switch is saved",
    )
    open_sidebar(page, viewport)
    page.get_by_test_id("message-hit").first.click()
    wait_position(users(page).nth(1), "1 / 2")
    assert text_of(found_message(page)) == "Pick a colour: crimson or teal?"


def test_a_word_said_nowhere_matches_no_message_until_it_is_said(page: Any, numbered: Gateway) -> None:  # noqa: F811
    sign_in(page, numbered.url, numbered.key)
    ask(page, "How do I bake sourdough bread at home?")
    indexed(numbered, "sourdough")
    results = search(page, "desktop", "zeppelinxq")
    assert results.get_by_test_id("message-search-empty").inner_text() == "No messages match."
    assert results.get_by_test_id("message-hit").count() == 0
    assert page.get_by_test_id("conversation").count() == 0  # nor any title
    # A single character searches titles only; Escape clears the box and the section goes.
    page.get_by_test_id("search").fill("z")
    page.get_by_test_id("message-search-results").wait_for(state="detached")
    search_box = page.get_by_test_id("search")
    search_box.fill("bread")
    assert answered(page, "bread").get_by_test_id("message-hit").count() == 1
    search_box.press("Escape")
    page.get_by_test_id("message-search-results").wait_for(state="detached")
    assert page.get_by_test_id("conversation").count() == 1

    # A message written after a search is found by asking again: Enter in the box.
    assert search(page, "desktop", "walrus").get_by_test_id("message-search-empty").count() == 1
    ask(page, "Tell me about walrus tusks")
    indexed(numbered, "walrus")
    page.get_by_test_id("search").press("Enter")
    page.get_by_test_id("message-hit").wait_for()
    assert page.get_by_test_id("message-hit").locator("mark").all_inner_texts() == ["walrus"]

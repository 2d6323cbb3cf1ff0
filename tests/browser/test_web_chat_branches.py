"""Message versions in real Chromium against the real gateway and a scripted worker whose answers are numbered: an
edit makes a sibling of the user message and a regenerate one of the answer, both switched with < k / n > (mouse and
keyboard, the focus kept, the switch announced), the shown branch kept across a reload (the API's current_node), a
rating of a version switched away from kept, a message sent under an older version continuing that branch, and the
Markdown export's other branches. At a desktop width and a phone's where it makes sense."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_web_chat import assistant, current_conversation, sign_in, wait_status
from tests.integration.conftest import Gateway, GatewayFactory, gateway_for  # noqa: F401 (a fixture)
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import scripted_worker

pytestmark = pytest.mark.browser

ANSWER = "Noted."
VIEWPORTS = {"desktop": {"width": 1280, "height": 860}, "phone": {"width": 375, "height": 780}}


@pytest.fixture
def numbered(gateway_for: GatewayFactory) -> Iterator[Gateway]:  # noqa: F811
    with serve(scripted_worker(ANSWER, delay_s=0.002, numbered=True)) as url:
        yield gateway_for({"flagship": [url], "mini": [url]})


@pytest.fixture(params=list(VIEWPORTS))
def viewport(request: pytest.FixtureRequest, page: Any) -> str:
    page.set_viewport_size(VIEWPORTS[request.param])
    return request.param


def until(check: Callable[[], bool], what: str, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.05)


def users(page: Any) -> Any:
    return page.locator('[data-testid="message"][data-role="user"]')


def answers(page: Any) -> Any:
    return page.locator('[data-testid="message"][data-role="assistant"]')


def text_of(message: Any) -> str:
    return message.locator(".message-body").first.inner_text().strip()


def position(message: Any) -> str | None:
    """The text of the message's versions control (`k / n`), None when it has none."""
    control = message.get_by_test_id("branch-position")
    return control.inner_text().strip() if control.count() else None


def wait_position(message: Any, expected: str | None) -> None:
    until(lambda: position(message) == expected, f"the message shows versions {expected!r}")


def ask(page: Any, text: str) -> str:
    """Send `text`, wait for its answer to be done and stored (the thumbs show), and return the answer's text."""
    count = answers(page).count()
    composer = page.get_by_test_id("composer")
    composer.fill(text)
    composer.press("Enter")
    until(lambda: answers(page).count() == count + 1, "the answer is on screen")
    assert wait_status(page, ("done",), timeout_ms=30_000) == "done"
    assistant(page).get_by_test_id("feedback-up").wait_for()
    return text_of(assistant(page))


def mark_answers(page: Any) -> None:
    page.evaluate(
        "() => document.querySelectorAll('[data-role=\"assistant\"]').forEach(e => { e.dataset.seen = '1'; })"
    )


def wait_new_answer_done(page: Any) -> str:
    page.wait_for_function(
        """() => { const a = document.querySelectorAll('[data-testid="message"][data-role="assistant"]');
                   const last = a[a.length - 1];
                   return !!last && !last.dataset.seen && last.dataset.status === 'done'; }""",
        timeout=30_000,
    )
    assistant(page).get_by_test_id("feedback-up").wait_for()
    return text_of(assistant(page))


def api_conversation(gw: Gateway, conversation_id: str) -> dict[str, Any]:
    response = httpx.get(f"{gw.url}/v1/conversations/{conversation_id}", headers=gw.headers(), timeout=10)
    response.raise_for_status()
    return response.json()


def chat_messages(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in messages if m["role"] in ("user", "assistant")]


def no_sideways_scroll(page: Any, viewport: str) -> None:
    width = page.evaluate("() => document.documentElement.scrollWidth")
    limit = VIEWPORTS[viewport]["width"]
    assert width <= limit, f"the page scrolls sideways ({width}px at {limit}px)"


def reopen(page: Any, conversation_id: str) -> None:
    """Reload the page: the conversation in its address opens again."""
    assert conversation_id in page.url
    page.reload()
    page.get_by_test_id("composer").wait_for()
    until(lambda: answers(page).count() > 0, "the conversation is shown again")
    wait_status(page, ("done",), timeout_ms=30_000)


def test_an_edit_makes_a_version_of_the_user_message(page: Any, numbered: Gateway, viewport: str) -> None:
    sign_in(page, numbered.url, numbered.key)
    first = ask(page, "First question")
    old = ask(page, "Second question")
    conversation_id = current_conversation(page)

    second = users(page).nth(1)
    second.get_by_test_id("edit").click()
    page.get_by_test_id("edit-input").fill("Second question, edited")
    mark_answers(page)
    page.get_by_test_id("edit-save").click()
    new = wait_new_answer_done(page)
    assert new != old
    wait_position(second, "2 / 2")
    assert text_of(second) == "Second question, edited"
    assert position(users(page).nth(0)) is None and position(assistant(page)) is None
    no_sideways_scroll(page, viewport)
    screenshot(page, f"branches-edit-{viewport}")

    # Previous: the old question and its answer are back, 1 / 2.
    second.get_by_test_id("branch-prev").click()
    wait_position(second, "1 / 2")
    assert text_of(second) == "Second question" and text_of(assistant(page)) == old
    assert second.get_by_test_id("branch-prev").is_disabled() and second.get_by_test_id("branch-next").is_enabled()
    screenshot(page, f"branches-edit-previous-{viewport}")

    # The switch is saved: the API shows that branch, the edit among the other branches, and everything counted.
    def switched() -> bool:
        record = api_conversation(numbered, conversation_id)
        return chat_messages(record["messages"])[-2:] == [("user", "Second question"), ("assistant", old)]

    until(switched, "the API shows the switched branch")
    record = api_conversation(numbered, conversation_id)
    assert chat_messages(record["messages"]) == [
        ("user", "First question"),
        ("assistant", first),
        ("user", "Second question"),
        ("assistant", old),
    ]
    assert chat_messages(record["branches"]) == [("user", "Second question, edited"), ("assistant", new)]
    assert record["current_node"] == record["messages"][-1]["id"]
    assert record["message_count"] == len(record["messages"]) + len(record["branches"])
    old_question, edited = record["messages"][-2], record["branches"][0]
    assert old_question["sibling_ids"] == [old_question["id"], edited["id"]] == edited["sibling_ids"]
    assert edited["parent_id"] == old_question["parent_id"] == record["messages"][-3]["id"]

    # A reload shows the branch switched to.
    reopen(page, conversation_id)
    second = users(page).nth(1)
    wait_position(second, "1 / 2")
    assert text_of(second) == "Second question" and text_of(assistant(page)) == old
    no_sideways_scroll(page, viewport)
    screenshot(page, f"branches-edit-reloaded-{viewport}")


def test_a_regenerate_makes_a_version_of_the_answer(page: Any, numbered: Gateway, viewport: str) -> None:
    sign_in(page, numbered.url, numbered.key)
    first = ask(page, "A question")
    conversation_id = current_conversation(page)
    mark_answers(page)
    assistant(page).get_by_test_id("regenerate").click()
    second = wait_new_answer_done(page)
    assert second != first
    answer = assistant(page)
    wait_position(answer, "2 / 2")
    assert answers(page).count() == 1 and users(page).count() == 1
    assert position(users(page).first) is None  # the question has one version
    no_sideways_scroll(page, viewport)
    screenshot(page, f"branches-regenerate-{viewport}")

    answer.get_by_test_id("branch-prev").click()
    wait_position(answer, "1 / 2")
    assert text_of(answer) == first

    # A thumbs-down on the first answer is stored, and still shown after switching away and back.
    answer.get_by_test_id("feedback-down").click()
    page.wait_for_function(
        """() => document.querySelector('[data-testid="feedback-down"]')?.getAttribute('aria-pressed') === 'true'"""
    )
    record = api_conversation(numbered, conversation_id)
    first_id = next(m["id"] for m in record["messages"] + record["branches"] if m["content"] == first)
    feedback = httpx.get(
        f"{numbered.url}/v1/conversations/{conversation_id}/feedback", headers=numbered.headers(), timeout=10
    ).json()["data"]
    assert [(f["message_index"], f["rating"]) for f in feedback] == [(first_id, "down")]

    answer.get_by_test_id("branch-next").click()
    wait_position(answer, "2 / 2")
    assert text_of(answer) == second
    assert answer.get_by_test_id("feedback-down").get_attribute("aria-pressed") == "false"
    answer.get_by_test_id("branch-prev").click()
    wait_position(answer, "1 / 2")
    assert text_of(answer) == first
    assert answer.get_by_test_id("feedback-down").get_attribute("aria-pressed") == "true"
    screenshot(page, f"branches-regenerate-rated-{viewport}")

    # After a reload too (the rating read back, bound to the answer once shown).
    reopen(page, conversation_id)
    answer = assistant(page)
    wait_position(answer, "1 / 2")
    until(lambda: answer.get_by_test_id("feedback-down").get_attribute("aria-pressed") == "true", "the rating shows")


def test_the_versions_control_works_from_the_keyboard(page: Any, numbered: Gateway) -> None:
    sign_in(page, numbered.url, numbered.key)
    ask(page, "A question")
    mark_answers(page)
    assistant(page).get_by_test_id("regenerate").click()
    wait_new_answer_done(page)
    answer = assistant(page)
    wait_position(answer, "2 / 2")
    group = answer.get_by_role("group", name="Message versions")
    assert group.count() == 1
    prev, nxt = answer.get_by_test_id("branch-prev"), answer.get_by_test_id("branch-next")
    assert prev.is_enabled() and nxt.is_disabled()

    def focused() -> str | None:
        return page.evaluate("() => document.activeElement?.dataset.testid ?? null")

    def live() -> str:
        return page.get_by_test_id("live-status").inner_text().strip()

    # Tab from the question's Edit button lands on the control (its disabled Next is skipped).
    users(page).first.get_by_test_id("edit").focus()
    page.keyboard.press("Tab")
    assert focused() == "branch-prev"

    # Enter: the previous version; Previous is disabled now, so the focus moves to Next, still in the control.
    page.keyboard.press("Enter")
    wait_position(answer, "1 / 2")
    until(lambda: live() == "Version 1 of 2", "the switch is announced")
    assert prev.is_disabled() and nxt.is_enabled()
    assert focused() == "branch-next"
    assert page.evaluate("() => !!document.activeElement?.closest('[role=group][aria-label=\"Message versions\"]')")
    screenshot(page, "branches-keyboard-desktop")

    # Space: the next one again, and the focus back on Previous.
    page.keyboard.press("Space")
    wait_position(answer, "2 / 2")
    until(lambda: live() == "Version 2 of 2", "the switch is announced")
    assert prev.is_enabled() and nxt.is_disabled()
    assert focused() == "branch-prev"


def test_a_message_sent_under_an_older_version_continues_it(page: Any, numbered: Gateway, viewport: str) -> None:
    sign_in(page, numbered.url, numbered.key)
    first = ask(page, "A question")
    conversation_id = current_conversation(page)
    mark_answers(page)
    assistant(page).get_by_test_id("regenerate").click()
    wait_new_answer_done(page)
    answer = answers(page).first
    wait_position(answer, "2 / 2")
    answer.get_by_test_id("branch-prev").click()
    wait_position(answer, "1 / 2")

    follow = ask(page, "A follow-up")
    assert answers(page).count() == 2
    wait_position(answers(page).first, "1 / 2")
    assert text_of(answers(page).first) == first
    assert position(assistant(page)) is None
    no_sideways_scroll(page, viewport)
    screenshot(page, f"branches-continue-{viewport}")

    record = api_conversation(numbered, conversation_id)
    path = [m for m in record["messages"] if m["role"] in ("user", "assistant")]
    assert chat_messages(path) == [
        ("user", "A question"),
        ("assistant", first),
        ("user", "A follow-up"),
        ("assistant", follow),
    ]
    assert path[2]["parent_id"] == path[1]["id"]  # under the first answer, the version shown
    assert path[1]["sibling_ids"][0] == path[1]["id"] and len(path[1]["sibling_ids"]) == 2
    assert record["current_node"] == path[3]["id"]


def test_the_markdown_export_holds_the_other_branches(page: Any, numbered: Gateway) -> None:
    sign_in(page, numbered.url, numbered.key)
    ask(page, "A question")
    users(page).first.get_by_test_id("edit").click()
    page.get_by_test_id("edit-input").fill("A better question")
    mark_answers(page)
    page.get_by_test_id("edit-save").click()
    edited = wait_new_answer_done(page)
    wait_position(users(page).first, "2 / 2")

    href = page.get_by_test_id("export-markdown").get_attribute("href")
    assert href
    response = page.request.get(f"{numbered.url}{href}")
    assert response.ok
    text = response.text()
    assert "## Other branches" in text, text
    shown, other = text.split("## Other branches", 1)
    assert "A better question" in shown and edited in shown
    assert "A question" in other and "A better question" not in other

"""The message tree through the gateway (real HTTP, the openai SDK, SQLite, an echoing stand-in that records what it
was sent): edits and regenerates keep every version, each branch's prompt is the same bytes whenever it is rendered,
switching persists, and exports print every branch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from shared.rendering import SYSTEM_PROMPTS
from tests.integration.accounts.test_conversations_api import Setup, echo_setup
from tests.integration.conftest import GatewayFactory


@pytest.fixture
def setup(gateway_for: GatewayFactory) -> Iterator[Setup]:
    with echo_setup(gateway_for) as ready:
        yield ready


def turn(setup: Setup, conversation_id: str, text: str, **extra: Any) -> dict[str, Any]:
    reply = setup.api.chat.completions.create(
        model="mini",
        messages=[{"role": "user", "content": text}],
        extra_body={"conversation_id": conversation_id, **extra},
    )
    return reply.model_dump()["conversation"]


def prompt(setup: Setup) -> list[dict[str, Any]]:
    return setup.worker.state.bodies[-1]["messages"]


def detail(setup: Setup, conversation_id: str) -> dict[str, Any]:
    response = setup.get(f"/v1/conversations/{conversation_id}")
    assert response.status_code == 200, response.text
    return response.json()


def switch(setup: Setup, conversation_id: str, node: int, key: str | None = None):
    return setup.send("PATCH", f"/v1/conversations/{conversation_id}", key, json={"current_node": node})


def two_branches(setup: Setup) -> str:
    """0 Lisbon → 1 → 2 "Three days" → 3; an edit of 2: 4 "Five days" → 5 (active)."""
    conversation_id = setup.start()["conversation"]["id"]
    turn(setup, conversation_id, "Three days")
    assert turn(setup, conversation_id, "Five days", replace_from=2)["message_ids"] == [4, 5]
    return conversation_id


def test_each_branch_renders_the_same_bytes_and_continues_where_it_left_off(setup: Setup) -> None:
    conversation_id = setup.start()["conversation"]["id"]
    turn(setup, conversation_id, "Three days")
    three_days = prompt(setup)
    turn(setup, conversation_id, "Five days", replace_from=2)
    five_days = prompt(setup)
    # The edit's prompt is the shared path (system prompt, first turn), then the new text: a prefix the cache holds.
    assert five_days[:-1] == three_days[:-1] and five_days[-1] == {"role": "user", "content": "Five days"}

    switched = switch(setup, conversation_id, 2)  # an inner message: its branch's newest message becomes current
    assert switched.status_code == 200 and switched.json()["current_node"] == 3
    turn(setup, conversation_id, "Museums?")
    back_on_three = prompt(setup)
    assert back_on_three == [*three_days, {"role": "assistant", "content": "echo: Three days"}, back_on_three[-1]]
    assert back_on_three[-1] == {"role": "user", "content": "Museums?"}

    assert switch(setup, conversation_id, 4).json()["current_node"] == 5
    turn(setup, conversation_id, "Museums?")
    back_on_five = prompt(setup)
    assert back_on_five[:-1] == [*five_days, {"role": "assistant", "content": "echo: Five days"}]
    assert back_on_five[0] == {"role": "system", "content": SYSTEM_PROMPTS[1]}

    stored = detail(setup, conversation_id)
    assert [m["content"] for m in stored["messages"]] == [
        "Plan a trip to Lisbon", "echo: Plan a trip to Lisbon", "Five days", "echo: Five days", "Museums?",
        "echo: Museums?",
    ]  # fmt: skip
    assert [m["id"] for m in stored["messages"]] == [0, 1, 4, 5, 8, 9] and stored["current_node"] == 9
    assert [m["id"] for m in stored["branches"]] == [2, 3, 6, 7]
    assert stored["messages"][2]["sibling_ids"] == [2, 4] and stored["message_count"] == 10


def test_parent_message_id_continues_an_older_message(setup: Setup) -> None:
    conversation_id = two_branches(setup)
    assert turn(setup, conversation_id, "Cheap hotels?", parent_message_id=3)["message_ids"] == [6, 7]
    assert [m["content"] for m in prompt(setup)[1:]] == [
        "Plan a trip to Lisbon", "echo: Plan a trip to Lisbon", "Three days", "echo: Three days", "Cheap hotels?",
    ]  # fmt: skip
    stored = detail(setup, conversation_id)
    assert [m["id"] for m in stored["messages"]] == [0, 1, 2, 3, 6, 7] and stored["messages"][4]["parent_id"] == 3


def test_a_regenerate_adds_an_answer_version_with_the_same_prompt(setup: Setup) -> None:
    conversation_id = setup.start()["conversation"]["id"]
    first = prompt(setup)
    assert turn(setup, conversation_id, "Plan a trip to Lisbon", replace_from=0)["message_ids"] == [2]
    assert prompt(setup) == first
    stored = detail(setup, conversation_id)
    assert [(m["id"], m["sibling_ids"]) for m in stored["messages"]] == [(0, [0]), (2, [1, 2])]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"parent_message_id": 9}, "parent_message_id"),
        ({"replace_from": 1}, "replace_from"),  # an answer, not a user message
        ({"replace_from": 2, "parent_message_id": 1}, None),  # one or the other
    ],
    ids=["unknown-parent", "edit-of-an-answer", "both"],
)
def test_a_bad_place_is_a_400_and_changes_nothing(setup: Setup, extra: dict[str, int], param: str | None) -> None:
    conversation_id = two_branches(setup)
    before, calls = detail(setup, conversation_id), len(setup.worker.state.bodies)
    with pytest.raises(openai.BadRequestError) as refused:
        turn(setup, conversation_id, "x", **extra)
    assert param is None or refused.value.body["param"] == param
    assert detail(setup, conversation_id) == before and len(setup.worker.state.bodies) == calls


def test_switching_is_checked_scoped_and_not_a_turn(setup: Setup) -> None:
    conversation_id = two_branches(setup)
    before = detail(setup, conversation_id)
    for node in (6, -1):
        refused = switch(setup, conversation_id, node)
        assert refused.status_code == 400 and refused.json()["error"]["param"] in ("current_node", "body.current_node")
    assert switch(setup, conversation_id, 1, setup.gw.other_key).status_code == 404
    assert setup.send("PATCH", f"/v1/conversations/{conversation_id}", json={"current_node": None}).status_code == 400
    assert detail(setup, conversation_id) == before
    switched = switch(setup, conversation_id, 3).json()
    assert (switched["version"], switched["updated_at"]) == (before["version"], before["updated_at"])
    listed = setup.get("/v1/conversations").json()["data"]
    assert [(c["id"], c["current_node"]) for c in listed] == [(conversation_id, 3)]


def test_exports_hold_every_branch_once(setup: Setup) -> None:
    conversation_id = two_branches(setup)
    exported = setup.get(f"/v1/conversations/{conversation_id}/export").json()
    assert [m["id"] for m in exported["messages"]] == [0, 1, 4, 5] and [m["id"] for m in exported["branches"]] == [2, 3]
    markdown = setup.get(f"/v1/conversations/{conversation_id}/export", params={"format": "markdown"}).text
    active, other = markdown.split("## Other branches")
    assert "Five days" in active and "Three days" not in active
    assert "_Message 2, version 1 of 2:_" in other and other.count("echo: Three days") == 1
    assert markdown.count("Plan a trip to Lisbon") == 3  # the title, the one stored first message and its echo
    account = setup.get("/v1/account/export").json()
    [mine] = [c for c in account["conversations"] if c["id"] == conversation_id]
    assert len(mine["messages"]) + len(mine["branches"]) == 6
    assert setup.send("DELETE", "/v1/account/data").status_code == 200
    assert setup.get(f"/v1/conversations/{conversation_id}").status_code == 404

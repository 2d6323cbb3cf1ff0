"""A Responses API continuation stored against a conversation that changed since it was read (a real SQLite store):
another turn appended first sends it to its branch with the history it continued; a rewrite that appended nothing
(a response's record deleted) leaves it in place; finishing it again (another gateway finishing the same answer) finds
it stored and stores nothing twice."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from functions.chat.conversation_turns import AnsweredBy, ConversationTurns, Turn
from shared.fleet.tiers import Tier
from shared.storage.accounts import Tenant
from shared.storage.conversations import StoredMessage, new_conversation_id
from shared.storage.sqlite.conversations import SQLiteConversationStore
from shared.wire.responses_api import ResponseRecord
from shared.wire.schemas import ChatCompletionRequest

T0 = datetime(2026, 12, 1, tzinfo=UTC)
TENANT = Tenant(id="ten_a", name="a", tier=Tier.PLUS, created_at=T0)


def record(number: int, conversation_id: str) -> ResponseRecord:
    return ResponseRecord(id=f"resp_{conversation_id[5:]}{number:016x}", created_at=1, model="mini")


@pytest.fixture
def store(tmp_path: Path) -> SQLiteConversationStore:
    return SQLiteConversationStore(tmp_path / "fleetchat.db")


def started(store: SQLiteConversationStore) -> str:
    """A conversation with one stored response: (user, assistant with the record of response 1)."""
    conversation_id = new_conversation_id()
    first = [
        StoredMessage(role="user", content="Name a fruit.", created_at=T0),
        StoredMessage(
            role="assistant", content="Apple.", created_at=T0, finish_reason="stop", response=record(1, conversation_id)
        ),
    ]
    store.append_turn(TENANT.id, conversation_id, expected_version=0, messages=first, expires_at=None, render_version=1)
    return conversation_id


def continuation(
    turns: ConversationTurns, store: SQLiteConversationStore, conversation_id: str, text: str, number: int = 2
) -> Turn:
    """A continuation of response 1 as the Responses API places it: the conversation as read, and its branch."""
    loaded = store.get(TENANT.id, conversation_id)
    request = ChatCompletionRequest(
        model="mini", messages=[{"role": "user", "content": text}], conversation_id=conversation_id
    )
    turn = asyncio.run(turns.begin(TENANT, request, None, loaded=loaded, fork_to=new_conversation_id()))
    assert turn is not None
    turn.response = record(number, conversation_id)
    return turn


def finish(turns: ConversationTurns, turn: Turn, answer: str) -> tuple[bool, int | None]:
    return asyncio.run(turns.finish(turn, answer, "stop", AnsweredBy("mini")))


def test_another_turn_stored_first_sends_this_one_to_its_branch(store: SQLiteConversationStore) -> None:
    turns = ConversationTurns(store)
    conversation_id = started(store)
    mine = continuation(turns, store, conversation_id, "And a vegetable?")
    other = continuation(turns, store, conversation_id, "And a grain?", number=3)
    assert finish(turns, other, "Rice.") == (True, 2)
    stored, _ = finish(turns, mine, "Carrot.")
    assert stored and mine.conversation_id == mine.fork_to
    branch = store.get(TENANT.id, mine.conversation_id)
    assert branch is not None
    assert [m.content for m in branch.messages] == ["Name a fruit.", "Apple.", "And a vegetable?", "Carrot."]
    assert branch.messages[1].response is None and branch.messages[3].response is not None  # records stay put
    original = store.get(TENANT.id, conversation_id)
    assert original is not None and [m.content for m in original.messages][2:] == ["And a grain?", "Rice."]


def test_a_rewrite_that_appended_nothing_leaves_it_in_place(store: SQLiteConversationStore) -> None:
    turns = ConversationTurns(store)
    conversation_id = started(store)
    mine = continuation(turns, store, conversation_id, "And a vegetable?")
    read = store.get(TENANT.id, conversation_id)
    assert read is not None  # meanwhile response 1 is deleted: its record dropped, the turns unchanged
    tail = [read.messages[1].model_copy(update={"response": None})]
    store.append_turn(
        TENANT.id, conversation_id, expected_version=read.version, messages=tail, expires_at=None, render_version=1,
        loaded=read, keep=1,
    )  # fmt: skip
    assert finish(turns, mine, "Carrot.")[0] and mine.conversation_id == conversation_id
    after = store.get(TENANT.id, conversation_id)
    assert after is not None and [m.content for m in after.messages][2:] == ["And a vegetable?", "Carrot."]


@pytest.mark.parametrize("raced", [False, True])
def test_finishing_a_stored_continuation_again_stores_nothing_twice(
    store: SQLiteConversationStore, raced: bool
) -> None:
    turns = ConversationTurns(store)
    conversation_id = started(store)
    mine = continuation(turns, store, conversation_id, "And a vegetable?")
    if raced:  # it went to its branch the first time
        finish(turns, continuation(turns, store, conversation_id, "And a grain?", number=3), "Rice.")
    assert finish(turns, mine, "Carrot.")[0]
    where = mine.conversation_id
    again = continuation(turns, store, conversation_id, "And a vegetable?")  # another gateway finishing the same answer
    again.response, again.fork_to = mine.response, mine.fork_to
    again.expected_version = 1  # as read when it was placed
    assert finish(turns, again, "Carrot.")[0] and again.conversation_id == where
    stored_anywhere = [store.get(TENANT.id, conversation_id), store.get(TENANT.id, mine.fork_to or "")]
    answers = [m.content for c in stored_anywhere if c is not None for m in c.messages]
    assert answers.count("Carrot.") == 1  # once, in one conversation

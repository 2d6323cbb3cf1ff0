"""The context window of a long conversation (shared/context_window.py): the oldest turns leave in steps, the cut
never moves between steps (so each turn's prompt starts with the previous turn's), lands on a user message, keeps the
system prompt and the newest turn, and keeps the estimate within the budget; and ConversationTurns reports it."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime
from pathlib import Path

from functions.chat.conversation_turns import OUT_OF_CONTEXT_HEADER, ConversationTurns
from shared.context_window import ContextWindow, message_tokens, pinned_count, window_start
from shared.fleet.tiers import Tier
from shared.rendering import canonical_bytes, render
from shared.storage.accounts import Tenant
from shared.storage.conversations import StoredMessage, new_conversation_id
from shared.storage.sqlite.conversations import SQLiteConversationStore
from shared.wire.schemas import ChatCompletionRequest
from shared.wire.tools_api import ToolCall

T0 = datetime(2026, 12, 7, tzinfo=UTC)
WINDOW = ContextWindow.for_context(2000)  # budget 1500, keep 800 estimated tokens


def msg(role: str, size: int = 300, **fields: object) -> StoredMessage:
    return StoredMessage(role=role, content="x" * size, created_at=T0, **fields)  # type: ignore[arg-type]


def conversation(turns: int, seed: int = 7) -> list[StoredMessage]:
    rng = random.Random(seed)
    messages = [msg("system", 200)]
    for _ in range(turns):
        messages += [msg("user", rng.randint(20, 900)), msg("assistant", rng.randint(20, 1500))]
    return messages


def kept_cost(messages: list[StoredMessage], start: int) -> int:
    pinned = pinned_count(messages)
    return sum(message_tokens(m) for m in [*messages[:pinned], *messages[start:]])


def test_a_short_conversation_keeps_everything() -> None:
    messages = conversation(3)
    assert window_start([*messages, msg("user", 50)], WINDOW) == 1


def test_over_200_turns_the_cut_only_moves_forward_in_steps_and_every_prompt_fits() -> None:
    messages = conversation(200)
    window = ContextWindow.for_context(8192)  # about 14 of these turns fit, a jump leaves about 7
    starts, prompts = [], []
    for turn in range(1, 201):
        prompt = messages[: 1 + 2 * turn - 1]  # the history plus this turn's user message
        start = window_start(prompt, window)
        starts.append(start)
        assert prompt[start].role == "user" and kept_cost(prompt, start) <= window.budget
        prompts.append(canonical_bytes(render(1, [*prompt[:1], *prompt[start:-1]], prompt[-1:])))
    assert starts == sorted(starts) and starts[-1] > 1
    jumps = [n for n in range(1, 200) if starts[n] != starts[n - 1]]
    assert 0 < len(jumps) <= 40  # steps of several turns, not a slide by one turn each time
    for n in range(1, 200):
        if n not in jumps:  # between jumps each prompt starts with the previous prompt's messages, byte for byte
            previous = prompts[n - 1][:-1]  # the JSON list without its closing bracket
            assert prompts[n].startswith(previous)


def test_the_cut_never_parts_a_tool_call_from_its_result() -> None:
    call = ToolCall.model_validate({"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}})
    messages = [msg("system", 100)]
    for _ in range(40):
        messages += [msg("user", 200), msg("assistant", 10, tool_calls=[call]), msg("tool", 900, tool_call_id="c1"),
                     msg("assistant", 300)]  # fmt: skip
    start = window_start(messages, WINDOW)
    assert start > 1 and messages[start].role == "user"


def test_one_turn_larger_than_the_budget_is_kept_whole() -> None:
    messages = [msg("system", 100), msg("user", 300), msg("assistant", 300), msg("user", 9000)]
    assert window_start(messages, WINDOW) == 3


def test_the_turn_says_how_many_stored_messages_are_out_of_context(tmp_path: Path) -> None:
    store = SQLiteConversationStore(tmp_path / "c.db")
    turns = ConversationTurns(store, {"mini": 2000})
    tenant = Tenant(id="ten_a", name="a", tier=Tier.PLUS, created_at=T0)
    history = conversation(30)
    conversation_id = new_conversation_id()
    store.append_turn(tenant.id, conversation_id, expected_version=0, messages=history, expires_at=None,
                      render_version=1)  # fmt: skip
    request = ChatCompletionRequest.model_validate(
        {"model": "mini", "messages": [{"role": "user", "content": "and then?"}], "conversation_id": conversation_id}
    )
    turn = asyncio.run(turns.begin(tenant, request, None, pool="mini"))
    assert turn is not None and turn.out_of_context > 0
    assert turn.rendered[0]["role"] == "system" and len(turn.rendered) == len(history) - turn.out_of_context + 1
    assert turn.summary(True, 2)["out_of_context"] == turn.out_of_context
    assert turn.headers()[OUT_OF_CONTEXT_HEADER] == str(turn.out_of_context)
    whole = asyncio.run(turns.begin(tenant, request, None, pool="unknown"))  # no context known: nothing left out
    assert whole is not None and whole.out_of_context == 0 and "out_of_context" not in whole.summary(True, 2)
    store.close()

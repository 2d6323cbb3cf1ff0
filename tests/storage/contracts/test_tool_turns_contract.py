"""Tool turns survive both conversation stores (SQLite file; DynamoDB + S3 on moto over HTTP) byte for byte, so the
history they render is the same after a read back (the prefix-cache contract across tool turns)."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.rendering import canonical_bytes, render
from shared.storage.conversations import ConversationStore, StoredMessage, new_conversation_id
from shared.wire.tools_api import ToolCall

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
CALL = ToolCall.model_validate(
    {"id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":  "Zürich"}'}}
)
TURNS = [
    StoredMessage(role="user", content="Weather in Zürich?", created_at=T0),
    StoredMessage(role="assistant", content="", created_at=T0, finish_reason="tool_calls", tool_calls=[CALL]),
    StoredMessage(role="tool", content='{"sky": "grey"}', created_at=T0, tool_call_id="call_9"),
    StoredMessage(role="assistant", content="Grey skies.", created_at=T0, finish_reason="stop"),
]


def test_tool_turns_read_back_identical(conversation_store: ConversationStore) -> None:
    conversation_id = new_conversation_id()
    conversation_store.append_turn(
        "ten_a", conversation_id, expected_version=0, messages=TURNS[:2], expires_at=None, render_version=1, now=T0
    )
    conversation_store.append_turn(
        "ten_a", conversation_id, expected_version=1, messages=TURNS[2:], expires_at=None, render_version=1, now=T0
    )
    got = conversation_store.get("ten_a", conversation_id, now=T0)
    assert got is not None and got.complete
    assert got.messages == TURNS
    assert canonical_bytes(render(1, got.messages, [])) == canonical_bytes(render(1, TURNS, []))

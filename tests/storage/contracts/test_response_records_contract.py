"""A stored response's record (the Responses API: its id, the request fields a Response repeats, its usage) survives
both conversation stores (SQLite file; DynamoDB + S3 on moto over HTTP), is dropped by rewriting the tail as
`DELETE /v1/responses/{id}` does, and is metadata: the history renders the same bytes with or without it."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.rendering import canonical_bytes, render
from shared.storage.conversations import ConversationStore, StoredMessage, new_conversation_id
from shared.wire.responses_api import ResponseRecord, ResponseUsageRecord

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def test_response_records_read_back_are_dropped_in_place_and_never_render(
    conversation_store: ConversationStore,
) -> None:
    conversation_id = new_conversation_id()
    record = ResponseRecord(
        id=f"resp_{conversation_id[5:]}{'0' * 16}",
        created_at=1_700_000_000,
        model="mini",
        instructions="Answer briefly.",
        metadata={"ticket": "42"},
        tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": None}],
        usage=ResponseUsageRecord(input_tokens=12, output_tokens=3, cached_tokens=8),
    )
    turn = [
        StoredMessage(role="system", content="Answer briefly.", created_at=T0),
        StoredMessage(role="user", content="Name a fruit.", created_at=T0),
        StoredMessage(role="assistant", content="Apple.", created_at=T0, finish_reason="stop", response=record),
    ]
    conversation_store.append_turn(
        "ten_a", conversation_id, expected_version=0, messages=turn, expires_at=None, render_version=1, now=T0
    )
    got = conversation_store.get("ten_a", conversation_id, now=T0)
    assert got is not None and got.complete
    assert got.messages[2].response == record and got.messages[1].response is None
    plain = [m.model_copy(update={"response": None}) for m in turn]
    assert canonical_bytes(render(1, got.messages, [])) == canonical_bytes(render(1, plain, []))

    # Deleting the response rewrites the tail without its record; the turn itself stays.
    conversation_store.append_turn(
        "ten_a",
        conversation_id,
        expected_version=got.version,
        messages=[got.messages[2].model_copy(update={"response": None})],
        expires_at=None,
        render_version=1,
        now=T0,
        loaded=got,
        keep=2,
    )
    after = conversation_store.get("ten_a", conversation_id, now=T0)
    assert after is not None and [m.content for m in after.messages] == ["Answer briefly.", "Name a fruit.", "Apple."]
    assert after.messages[2].response is None
    assert conversation_store.get("ten_b", conversation_id, now=T0) is None

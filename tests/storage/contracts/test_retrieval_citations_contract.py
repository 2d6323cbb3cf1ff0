"""An answer's retrieval citations survive both conversation stores (SQLite file; DynamoDB + S3 on moto over HTTP), and
they are metadata: the history renders the same bytes with or without them (the prefix-cache contract)."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.rendering import canonical_bytes, render
from shared.storage.conversations import ConversationStore, StoredMessage, new_conversation_id
from shared.wire.retrieval_api import Citation

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
CITED = [
    Citation(
        index=1, vector_store_id="vs_1", file_id="file-a", filename="Normans.txt", chunk_id="file-a-00002",
        start=740, end=1_912, score=0.6123,
    ),
    Citation(
        index=2, vector_store_id="vs_2", file_id="file-b", filename="Manual – v2.pdf", chunk_id="file-b-00000",
        start=0, end=500, score=0.41,
    ),
]  # fmt: skip
TURN = [
    StoredMessage(role="user", content="Who led the Normans?", created_at=T0),
    StoredMessage(role="assistant", content="Rollo [1].", created_at=T0, finish_reason="stop", citations=CITED),
]


def test_citations_read_back_and_never_render(conversation_store: ConversationStore) -> None:
    conversation_id = new_conversation_id()
    conversation_store.append_turn(
        "ten_a", conversation_id, expected_version=0, messages=TURN, expires_at=None, render_version=1, now=T0
    )
    got = conversation_store.get("ten_a", conversation_id, now=T0)
    assert got is not None and got.complete
    assert got.messages[1].citations == CITED and got.messages[0].citations is None
    plain = [m.model_copy(update={"citations": None}) for m in TURN]
    assert canonical_bytes(render(1, got.messages, [])) == canonical_bytes(render(1, plain, []))
    assert conversation_store.get("ten_b", conversation_id, now=T0) is None

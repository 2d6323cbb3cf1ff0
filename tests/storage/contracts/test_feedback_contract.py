"""The feedback contract, against SQLite and DynamoDB (moto over HTTP): replace, list, delete, erase, bad input."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from shared.settings import Settings
from shared.storage import factory
from shared.storage.conversations import StoredMessage, new_conversation_id
from shared.storage.feedback import FeedbackRecord, FeedbackStore, Rating, answer_digest

T0 = datetime(2026, 11, 24, 21, 0, tzinfo=UTC)
CONV_A, CONV_B = sorted(new_conversation_id() for _ in range(2))


@pytest.fixture
def feedback(conversations_table_settings: Settings) -> Iterator[FeedbackStore]:
    """The store the factory opens (SQLite, or the conversations table on DynamoDB via moto)."""
    settings = conversations_table_settings
    store = factory.open_feedback_store(settings)
    yield store
    store.close()


def record(index: int = 1, conversation: str = CONV_A, tenant: str = "ten_a", **fields: object) -> FeedbackRecord:
    values: dict[str, object] = {
        "tenant_id": tenant,
        "conversation_id": conversation,
        "message_index": index,
        "rating": Rating.DOWN,
        "comment": "wrong capital — it is Lisbon",
        "created_at": T0,
        "key_id": "key_1",
        "message_created_at": T0 - timedelta(minutes=1),
        "answer_sha256": answer_digest("Madrid"),
        "model": "mini",
        "model_source": "ledger",
        "pre_policy_version": "rules-3+clf-2",
        "post_policy_version": "rules-3",
    }
    return FeedbackRecord(**{**values, **fields})  # type: ignore[arg-type]


def test_round_trips_every_field_and_a_bare_record(feedback: FeedbackStore) -> None:
    full = record(1)
    bare = record(3, rating=Rating.UP, comment=None, key_id=None, model=None, model_source=None,
                  pre_policy_version=None, post_policy_version=None)  # fmt: skip
    assert feedback.put(full) is None and feedback.put(bare) is None
    assert feedback.get("ten_a", CONV_A, 1) == full
    assert feedback.list_conversation("ten_a", CONV_A) == [full, bare]


def test_a_second_rating_replaces_the_first_and_returns_it(feedback: FeedbackStore) -> None:
    first = record(1)
    feedback.put(first)
    second = record(1, rating=Rating.UP, comment=None, created_at=T0 + timedelta(seconds=5))
    assert feedback.put(second) == first
    assert feedback.list_conversation("ten_a", CONV_A) == [second]


def test_listings_are_ordered_and_tenant_scoped(feedback: FeedbackStore) -> None:
    records = [record(11, CONV_B), record(1, CONV_B), record(5, CONV_A), record(101, CONV_A)]
    other = record(1, CONV_A, tenant="ten_b")
    for r in [*records, other]:
        feedback.put(r)
    # Numeric index order (not text order: 101 after 5), conversations in id order.
    assert feedback.list_conversation("ten_a", CONV_A) == [records[2], records[3]]
    assert list(feedback.list_tenant("ten_a")) == [records[2], records[3], records[1], records[0]]
    assert list(feedback.list_tenant("ten_b")) == [other]
    assert feedback.tenants() == ["ten_a", "ten_b"]
    # Another tenant's ids find nothing.
    assert feedback.get("ten_b", CONV_B, 1) is None
    assert feedback.list_conversation("ten_b", CONV_B) == []
    assert not feedback.delete("ten_b", CONV_B, 1)
    assert feedback.delete_conversation("ten_b", CONV_B) == 0
    assert len(list(feedback.list_tenant("ten_a"))) == 4


def test_a_tenant_listing_crosses_pages(feedback: FeedbackStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite reads a tenant in pages (`_PAGE` rows per query; DynamoDB pages by size): shrunk here so that the
    listing crosses several, one ending exactly on a page boundary and one inside a conversation."""
    from shared.storage.sqlite import feedback as sqlite_feedback

    monkeypatch.setattr(sqlite_feedback, "_PAGE", 2)
    records = [record(i, conversation) for conversation in (CONV_A, CONV_B) for i in (1, 3, 5)]
    for r in reversed(records):
        feedback.put(r)
    feedback.put(record(1, tenant="ten_b"))
    assert list(feedback.list_tenant("ten_a")) == records
    assert feedback.delete("ten_a", CONV_B, 5)
    assert list(feedback.list_tenant("ten_a")) == records[:-1]  # 5 rows: the last page is short


def test_deletes_are_exact_and_idempotent(feedback: FeedbackStore) -> None:
    for r in (record(1), record(3), record(1, CONV_B), record(1, tenant="ten_b")):
        feedback.put(r)
    assert feedback.delete("ten_a", CONV_A, 3)
    assert not feedback.delete("ten_a", CONV_A, 3)
    assert feedback.delete_conversation("ten_a", CONV_A) == 1
    assert feedback.delete_conversation("ten_a", CONV_A) == 0
    assert [r.conversation_id for r in feedback.list_tenant("ten_a")] == [CONV_B]
    assert feedback.erase_tenant("ten_a") == 1
    assert feedback.erase_tenant("ten_a") == 0
    assert list(feedback.list_tenant("ten_a")) == []
    assert feedback.tenants() == ["ten_b"]  # the erased tenant is no longer listed; the other keeps its record
    assert feedback.get("ten_b", CONV_A, 1) == record(1, tenant="ten_b")


def test_bad_records_raise_before_anything_is_written(feedback: FeedbackStore) -> None:
    kept = record(1)
    feedback.put(kept)
    bad = [
        record(1).model_copy(update={"comment": "x" * 2001}),
        record(1).model_copy(update={"message_index": -1}),
        record(1).model_copy(update={"created_at": datetime(2026, 11, 24)}),  # naive
        record(1).model_copy(update={"answer_sha256": "not-a-digest"}),
        record(1).model_copy(update={"conversation_id": "conv_../../x"}),
    ]
    for candidate in bad:
        with pytest.raises(ValidationError):
            feedback.put(candidate)
    assert list(feedback.list_tenant("ten_a")) == [kept]


def test_a_record_rates_only_the_answer_it_was_given_for() -> None:
    rated = record(1)
    answer = StoredMessage(role="assistant", content="Madrid", created_at=rated.message_created_at)
    assert rated.rates(answer)
    assert not rated.rates(answer.model_copy(update={"content": "Lisbon"}))  # regenerated text
    assert not rated.rates(answer.model_copy(update={"created_at": T0}))  # a new answer with the same text
    assert not rated.rates(answer.model_copy(update={"role": "user"}))

"""FeedbackService on real SQLite stores: the model read from the ledger (one model, several, none, ledger down) and
a rating written while its conversation is deleted is taken back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from functions.auth import Caller
from functions.feedback.service import FeedbackService
from functions.gateway_metrics import GatewayMetrics
from shared.feedback_api import FeedbackCreate
from shared.storage.base import ApiKeyRecord, Tenant
from shared.storage.conversations import (
    Conversation,
    ConversationNotFoundError,
    StoredMessage,
    StoreUnavailableError,
    new_conversation_id,
)
from shared.storage.ledger import LedgerEntry, Outcome
from shared.storage.sqlite_conversations import SQLiteConversationStore
from shared.storage.sqlite_feedback import SQLiteFeedback
from shared.storage.sqlite_ledger import SQLiteLedger
from shared.tiers import Tier

T0 = datetime(2026, 11, 24, 21, 0, tzinfo=UTC)
TENANT = Tenant(id="ten_a", name="a", tier=Tier.PLUS, created_at=T0)
CALLER = Caller(TENANT, ApiKeyRecord(id="key_a", tenant_id="ten_a", key_hash="0" * 64, label="a", created_at=T0))
DOWN = FeedbackCreate(rating="down", comment="wrong")
Stores = tuple[SQLiteConversationStore, SQLiteFeedback, SQLiteLedger]


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Stores]:
    db = tmp_path / "fleetchat.db"
    opened = (SQLiteConversationStore(db), SQLiteFeedback(db), SQLiteLedger(db))
    yield opened
    for store in opened:
        store.close()


def conversation(store: SQLiteConversationStore, answered_at: datetime) -> str:
    conversation_id = new_conversation_id()
    store.append_turn(
        TENANT.id,
        conversation_id,
        expected_version=0,
        messages=[
            StoredMessage(role="user", content="Capital of Portugal?", created_at=answered_at),
            StoredMessage(role="assistant", content="Madrid", created_at=answered_at),
        ],
        expires_at=None,
        render_version=1,
        now=answered_at,
    )
    return conversation_id


def spend(ledger: SQLiteLedger, model: str, at: datetime, tenant_id: str = TENANT.id) -> None:
    ledger.record(
        LedgerEntry(
            request_id=f"req_{model}_{at.timestamp()}_{tenant_id}",
            tenant_id=tenant_id,
            key_id="key_a",
            model=model,
            prompt_tokens=10,
            completion_tokens=5,
            cached_tokens=0,
            outcome=Outcome.COMPLETED,
            created_at=at,
        )
    )


def service(conversations: Any, feedback: SQLiteFeedback, ledger: Any) -> FeedbackService:
    return FeedbackService(conversations, feedback, ledger, lambda: ("pre-1", "post-1"), GatewayMetrics())


def test_the_model_is_the_one_model_in_the_tenants_ledger_at_the_answers_time(stores: Stores) -> None:
    conversations, feedback, ledger = stores
    now = datetime.now(UTC)
    alone = conversation(conversations, now - timedelta(hours=3))
    spend(ledger, "flagship", now - timedelta(hours=3) + timedelta(seconds=1))
    spend(ledger, "mini", now - timedelta(hours=3) + timedelta(minutes=5))  # a later request: outside the window
    spend(ledger, "mini", now - timedelta(hours=3), tenant_id="ten_other")  # another tenant's
    record = service(conversations, feedback, ledger).give(CALLER, alone, 1, DOWN)
    assert (record.model, record.model_source) == ("flagship", "ledger")
    assert (record.pre_policy_version, record.post_policy_version) == ("pre-1", "post-1")

    busy = conversation(conversations, now - timedelta(hours=2))
    spend(ledger, "flagship", now - timedelta(hours=2))
    spend(ledger, "mini", now - timedelta(hours=2) + timedelta(seconds=2))
    assert service(conversations, feedback, ledger).give(CALLER, busy, 1, DOWN).model is None  # ambiguous

    unbilled = conversation(conversations, now - timedelta(hours=1))
    assert service(conversations, feedback, ledger).give(CALLER, unbilled, 1, DOWN).model is None
    assert service(conversations, feedback, None).give(CALLER, alone, 1, DOWN).model is None


class DownLedger:
    def usage(self, *_: object) -> list:
        raise StoreUnavailableError()


def test_a_ledger_outage_does_not_refuse_the_feedback(stores: Stores) -> None:
    conversations, feedback, _ = stores
    conversation_id = conversation(conversations, datetime.now(UTC))
    record = service(conversations, feedback, DownLedger()).give(CALLER, conversation_id, 1, DOWN)
    assert record.model is None and feedback.get(TENANT.id, conversation_id, 1) == record


class DeletedMeanwhile:
    """The conversation store as seen by a request racing a delete: the first read finds the conversation, then
    another request deletes it before this one's rating is written."""

    def __init__(self, inner: SQLiteConversationStore) -> None:
        self.inner = inner

    def get(self, tenant_id: str, conversation_id: str, **kwargs: object) -> Conversation | None:
        found = self.inner.get(tenant_id, conversation_id)
        self.inner.soft_delete(tenant_id, conversation_id)
        return found


def test_a_rating_given_while_its_conversation_is_deleted_is_taken_back(stores: Stores) -> None:
    conversations, feedback, ledger = stores
    conversation_id = conversation(conversations, datetime.now(UTC))
    racing = service(DeletedMeanwhile(conversations), feedback, ledger)
    with pytest.raises(ConversationNotFoundError):
        racing.give(CALLER, conversation_id, 1, DOWN)
    assert list(feedback.list_tenant(TENANT.id)) == []

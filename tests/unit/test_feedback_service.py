"""FeedbackService on real SQLite stores: the model read from the ledger (one model, several, none, ledger down); a
rating written while its conversation is deleted, or its account erased, is taken back, and so is one refused by an
outage; the rating of a replaced answer is not the message's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from functions.account_data import AccountData
from functions.accounts.auth import Caller
from functions.feedback.service import FeedbackNotFoundError, FeedbackService
from functions.metrics.gateway import GatewayMetrics
from shared.fleet.tiers import Tier
from shared.service_api.feedback_api import FeedbackCreate
from shared.storage.accounts import ApiKeyRecord, Tenant
from shared.storage.conversations import (
    AuditRecord,
    Conversation,
    ConversationNotFoundError,
    StoredMessage,
    StoreUnavailableError,
    new_conversation_id,
)
from shared.storage.ledger import LedgerEntry, Outcome
from shared.storage.sqlite.conversations import SQLiteConversationStore
from shared.storage.sqlite.feedback import SQLiteFeedback
from shared.storage.sqlite.ledger import SQLiteLedger

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


def conversation(store: SQLiteConversationStore, answered_at: datetime, **answered_by: str) -> str:
    """A stored question and answer; `answered_by`: the model and policies the answer records (none: an answer
    stored before messages kept them)."""
    conversation_id = new_conversation_id()
    store.append_turn(
        TENANT.id,
        conversation_id,
        expected_version=0,
        messages=[
            StoredMessage(role="user", content="Capital of Portugal?", created_at=answered_at),
            StoredMessage(role="assistant", content="Madrid", created_at=answered_at, **answered_by),
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


POOLS = ("mini", "flagship")


def service(conversations: Any, feedback: SQLiteFeedback, ledger: Any) -> FeedbackService:
    return FeedbackService(conversations, feedback, ledger, lambda: ("pre-1", "post-1"), GatewayMetrics(), POOLS)


def test_the_model_and_policies_are_the_answers_own(stores: Stores) -> None:
    conversations, feedback, ledger = stores
    now = datetime.now(UTC)
    answered = conversation(
        conversations, now, model="flagship", pre_policy_version="pre-0", post_policy_version="post-0"
    )
    spend(ledger, "mini", now)  # a concurrent request on another model: the message knows better
    record = service(conversations, feedback, ledger).give(CALLER, answered, 1, DOWN)
    assert (record.model, record.model_source) == ("flagship", "message")
    assert (record.pre_policy_version, record.post_policy_version) == ("pre-0", "post-0")  # not those of today
    assert service(conversations, feedback, DownLedger()).give(CALLER, answered, 1, DOWN).model == "flagship"


def test_an_older_answers_model_is_the_one_chat_model_in_the_tenants_ledger_at_its_time(stores: Stores) -> None:
    conversations, feedback, ledger = stores
    now = datetime.now(UTC)
    alone = conversation(conversations, now - timedelta(hours=3))
    spend(ledger, "flagship", now - timedelta(hours=3) + timedelta(seconds=1))
    spend(ledger, "moderation:llama-guard", now - timedelta(hours=3) + timedelta(seconds=2))  # not a chat answer
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


class RatedDuringErase:
    """The conversation store as an account erase meets it while a rating races the erase: just before the tenant's
    conversations go, the rating is written and re-checked (its conversation is still there, so it is kept)."""

    def __init__(self, inner: SQLiteConversationStore, rate: Callable[[], object]) -> None:
        self.inner, self.rate = inner, rate

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def erase_tenant(self, tenant_id: str, audit: AuditRecord) -> int:
        self.rate()
        return self.inner.erase_tenant(tenant_id, audit)


def test_a_rating_given_during_an_account_erase_does_not_outlive_it(stores: Stores) -> None:
    conversations, feedback, ledger = stores
    conversation_id = conversation(conversations, datetime.now(UTC))
    racing = service(conversations, feedback, ledger)
    erasing = RatedDuringErase(conversations, lambda: racing.give(CALLER, conversation_id, 1, DOWN))
    erased = AccountData(erasing, feedback).erase(TENANT.id)  # type: ignore[arg-type]
    assert (erased.deleted_conversations, erased.deleted_feedback) == (1, 1)
    assert list(feedback.list_tenant(TENANT.id)) == []


class DownOnRecheck:
    """A conversation store that answers the first read and is unreachable for the second (the re-check)."""

    def __init__(self, inner: SQLiteConversationStore) -> None:
        self.inner, self.reads = inner, 0

    def get(self, tenant_id: str, conversation_id: str, **kwargs: object) -> Conversation | None:
        self.reads += 1
        if self.reads > 1:
            raise StoreUnavailableError()
        return self.inner.get(tenant_id, conversation_id)


def test_a_rating_refused_by_an_outage_on_the_recheck_leaves_the_stored_one_as_it_was(stores: Stores) -> None:
    conversations, feedback, ledger = stores
    conversation_id = conversation(conversations, datetime.now(UTC))
    metrics = GatewayMetrics()
    first = service(conversations, feedback, ledger).give(CALLER, conversation_id, 1, DOWN)
    flaky = FeedbackService(DownOnRecheck(conversations), feedback, ledger, lambda: (None, None), metrics, POOLS)  # type: ignore[arg-type]
    with pytest.raises(StoreUnavailableError):  # the client is told 503 ...
        flaky.give(CALLER, conversation_id, 1, FeedbackCreate(rating="up"))
    assert feedback.get(TENANT.id, conversation_id, 1) == first  # ... and the earlier rating is back
    assert metrics.feedback.labels("up")._value.get() == 0

    other = conversation(conversations, datetime.now(UTC))
    with pytest.raises(StoreUnavailableError):
        FeedbackService(DownOnRecheck(conversations), feedback, ledger, lambda: (None, None), metrics, POOLS).give(  # type: ignore[arg-type]
            CALLER, other, 1, DOWN
        )
    assert feedback.get(TENANT.id, other, 1) is None  # a first rating is removed again


def test_the_rating_of_a_replaced_answer_is_not_the_messages_own(stores: Stores) -> None:
    conversations, feedback, ledger = stores
    at = datetime.now(UTC)
    conversation_id = conversation(conversations, at)
    feedback_service = service(conversations, feedback, ledger)
    feedback_service.give(CALLER, conversation_id, 1, DOWN)
    conversations.append_turn(  # regenerate: a new answer at index 1
        TENANT.id,
        conversation_id,
        expected_version=1,
        messages=[StoredMessage(role="assistant", content="Lisbon", created_at=at + timedelta(seconds=1))],
        expires_at=None,
        render_version=1,
        keep=1,
    )
    for read in (feedback_service.one, feedback_service.remove):
        with pytest.raises(FeedbackNotFoundError):
            read(TENANT.id, conversation_id, 1)
    assert feedback.get(TENANT.id, conversation_id, 1) is not None  # the sweep removes it with the conversation

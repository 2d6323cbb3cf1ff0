"""Feedback lives under its conversation's retention: the sweep removes it with an expired or purged conversation,
keeps it for held tenants, changes nothing on a dry run, and resumes after a failure."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from functions.jobs.retention_sweep import run_sweep, sweep_from_settings
from shared.fleet.tiers import Tier
from shared.settings import Settings
from shared.storage.conversations import AuditRecord, ConversationStore, StoredMessage
from shared.storage.feedback import FeedbackRecord, Rating, answer_digest
from shared.storage.sqlite.accounts import SQLiteStore
from shared.storage.sqlite.conversations import SQLiteConversationStore
from shared.storage.sqlite.feedback import SQLiteFeedback
from tests.storage.retention.test_retention_sweep import T0, FlakyStore, chat, tenant


@pytest.fixture
def feedback(tmp_path: Path) -> Iterator[SQLiteFeedback]:
    store = SQLiteFeedback(tmp_path / "feedback.db")
    yield store
    store.close()


def rate(feedback: SQLiteFeedback, tenant_id: str, conversation_id: str, index: int = 1) -> FeedbackRecord:
    record = FeedbackRecord(
        tenant_id=tenant_id,
        conversation_id=conversation_id,
        message_index=index,
        rating=Rating.DOWN,
        comment="remember me?",
        created_at=T0,
        message_created_at=T0,
        answer_sha256=answer_digest("an answer"),
    )
    feedback.put(record)
    return record


def remaining(feedback: SQLiteFeedback) -> list[str]:
    return [r.conversation_id for t in feedback.tenants() for r in feedback.list_tenant(t)]


def test_expired_and_purged_conversations_take_their_feedback(
    conversation_store: ConversationStore, feedback: SQLiteFeedback
) -> None:
    free, plus = tenant("free", Tier.FREE), tenant("plus", Tier.PLUS)
    held = tenant("held", Tier.FREE)
    expiring, kept, deleted, on_hold = (chat(conversation_store, t) for t in (free, plus, plus, held))
    held = held.model_copy(update={"legal_hold": True})  # put on hold after its conversation began to expire
    tenants = {t.id: t for t in (free, plus, held)}
    for owner, conversation_id in ((free, expiring), (plus, kept), (plus, deleted), (held, on_hold)):
        rate(feedback, owner.id, conversation_id)
    rate(feedback, free.id, expiring, index=3)
    conversation_store.soft_delete(plus.id, deleted, now=T0 + timedelta(days=1))

    dry = run_sweep(
        conversation_store, tenants.get, now=T0 + timedelta(days=32), dry_run=True, feedback=feedback,
        show_progress=False,
    )  # fmt: skip
    assert (dry.expired, dry.purged, dry.feedback_deleted) == (1, 1, 3)  # what the real run deletes
    assert sorted(remaining(feedback)) == sorted([expiring, expiring, kept, deleted, on_hold])

    report = run_sweep(
        conversation_store, tenants.get, now=T0 + timedelta(days=32), feedback=feedback, show_progress=False
    )
    assert (report.expired, report.purged, report.held, report.feedback_deleted) == (1, 1, 1, 3)
    assert sorted(remaining(feedback)) == sorted([kept, on_hold])


def test_a_sweep_stopped_after_the_feedback_finishes_the_conversation_next_run(
    conversation_store: ConversationStore, feedback: SQLiteFeedback
) -> None:
    free = tenant("free", Tier.FREE)
    conversation_id = chat(conversation_store, free)
    rate(feedback, free.id, conversation_id)
    flaky = FlakyStore(conversation_store, failures=1)
    now = T0 + timedelta(days=31)
    first = run_sweep(flaky, {free.id: free}.get, now=now, feedback=feedback, show_progress=False)  # type: ignore[arg-type]
    assert (first.failed, first.feedback_deleted, remaining(feedback)) == (1, 1, [])
    second = run_sweep(flaky, {free.id: free}.get, now=now, feedback=feedback, show_progress=False)  # type: ignore[arg-type]
    assert (second.expired, second.feedback_deleted) == (1, 0)
    assert conversation_store.get(free.id, conversation_id, now=T0) is None


def test_feedback_whose_conversation_vanished_without_the_sweep_is_deleted(
    conversation_store: ConversationStore, feedback: SQLiteFeedback
) -> None:
    """On DynamoDB the TTL backstop removes a conversation record the sweep missed for a week, leaving its feedback:
    the sweep finds and deletes it (a held tenant keeps its own; a live conversation keeps its feedback)."""
    plus, held = tenant("plus", Tier.PLUS), tenant("held", Tier.PLUS, legal_hold=True)
    vanished, live, held_vanished = (
        chat(conversation_store, plus),
        chat(conversation_store, plus),
        chat(conversation_store, held),
    )
    for owner, conversation_id in ((plus, vanished), (plus, live), (held, held_vanished)):
        rate(feedback, owner.id, conversation_id)
    rate(feedback, plus.id, vanished, index=3)
    audit = AuditRecord(at=T0, actor="dynamodb-ttl", action="expire", tenant_id=plus.id)
    for owner, conversation_id in ((plus, vanished), (held, held_vanished)):  # as the TTL would: no sweep
        assert conversation_store.hard_delete(
            owner.id, conversation_id, audit.model_copy(update={"tenant_id": owner.id})
        )
    tenants = {t.id: t for t in (plus, held)}.get

    dry = run_sweep(conversation_store, tenants, now=T0, dry_run=True, feedback=feedback, show_progress=False)
    assert (dry.feedback_orphans_deleted, len(remaining(feedback))) == (2, 4)
    report = run_sweep(conversation_store, tenants, now=T0, feedback=feedback, show_progress=False)
    assert (report.feedback_orphans_deleted, report.feedback_deleted) == (2, 0)
    assert sorted(remaining(feedback)) == sorted([live, held_vanished])
    again = run_sweep(conversation_store, tenants, now=T0, feedback=feedback, show_progress=False)
    assert again.feedback_orphans_deleted == 0


def test_the_scheduled_job_opens_the_feedback_store(tmp_path: Path) -> None:
    """`sweep_from_settings` (the CLI and the Modal cron) sweeps the configured feedback store too."""
    settings = Settings(data_dir=tmp_path)
    accounts = SQLiteStore(settings.db_path)
    free = accounts.create_tenant("free", Tier.FREE)
    accounts.close()
    conversations = SQLiteConversationStore(settings.db_path)
    conversation_id = chat(conversations, free)
    conversations.append_turn(
        free.id,
        conversation_id,
        expected_version=1,
        messages=[StoredMessage(role="assistant", content="an answer", created_at=T0)],
        expires_at=T0 + timedelta(days=30),
        render_version=1,
        now=T0,
    )
    conversations.close()
    feedback = SQLiteFeedback(settings.db_path)
    rate(feedback, free.id, conversation_id)
    report = sweep_from_settings(settings, now=T0 + timedelta(days=31))
    assert (report.expired, report.feedback_deleted, remaining(feedback)) == (1, 1, [])
    feedback.close()

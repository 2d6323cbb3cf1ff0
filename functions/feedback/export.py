"""Feedback export: each current rating joined with the conversation it rates, as JSONL rows for reward-model training
or as candidate golden items (the thumbs-down ones) for the eval golden sets.

Content is read from the conversation store at export time, so a conversation that was deleted, expired or erased
exports nothing, and a rating whose answer was replaced since (an edit, a regenerate) is skipped and counted.
An export is a copy outside the service's retention and erasure: it falls under the training data's own policy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from datetime import datetime
from itertools import groupby
from typing import Literal

from pydantic import BaseModel

from shared.rendering import render
from shared.storage.conversations import Conversation, ConversationStore
from shared.storage.feedback import FeedbackRecord, FeedbackStore, Rating
from shared.storage.timestamps import to_iso


class ExportFilter(BaseModel):
    rating: Rating | None = None
    tenant_id: str | None = None
    since: datetime | None = None  # ratings given at or after this time

    def keeps(self, record: FeedbackRecord) -> bool:
        return (self.rating is None or record.rating is self.rating) and (
            self.since is None or record.created_at >= self.since
        )


class PolicyVersions(BaseModel):
    pre: str | None  # the safety gate on the conversation
    post: str | None  # the filter on the generated stream


class FeedbackRow(BaseModel):
    """One rated answer with the prompt the model saw (the conversation rendered up to it, system prompt included)."""

    id: str
    tenant_id: str
    conversation_id: str
    message_index: int
    rating: Rating
    comment: str | None
    prompt: list[dict[str, str]]
    messages: list[dict[str, str]]  # the stored conversation before the answer: what a client sends
    answer: str
    finish_reason: str | None
    model: str | None
    model_source: str | None
    policy_versions: PolicyVersions
    render_version: int
    answered_at: str
    rated_at: str


class GoldenCandidate(BaseModel):
    """A thumbs-down answer as a candidate item for an eval golden set: `messages` is what a client sends (the
    stored conversation before the answer), `answer` the rejected one; a person assigns the category."""

    id: str
    source: Literal["feedback"] = "feedback"
    category: None = None
    messages: list[dict[str, str]]
    answer: str
    comment: str | None


class ExportCounts(BaseModel):
    exported: int = 0
    conversation_gone: int = 0  # deleted, expired or erased since the rating: not exported
    answer_replaced: int = 0  # the rated answer was edited away or regenerated: not exported


def row_id(record: FeedbackRecord) -> str:
    """Stable for one rating: the same record exports under the same id, a replacement under a new one."""
    key = f"{record.tenant_id}/{record.conversation_id}/{record.message_index}/{to_iso(record.created_at)}"
    return f"fb_{hashlib.sha256(key.encode()).hexdigest()[:24]}"


def feedback_rows(
    feedback: FeedbackStore,
    conversations: ConversationStore,
    chosen: ExportFilter,
    counts: ExportCounts,
    *,
    now: datetime | None = None,
    on_record: Callable[[], None] = lambda: None,
) -> Iterator[FeedbackRow]:
    """The current ratings that pass `chosen`, tenant by tenant, each conversation read once; `counts` is updated as
    rows are produced (and skipped) and `on_record` called for every record read."""
    tenants = [chosen.tenant_id] if chosen.tenant_id is not None else feedback.tenants()
    for tenant_id in tenants:
        records = (r for r in feedback.list_tenant(tenant_id) if chosen.keeps(r))
        for conversation_id, rated in groupby(records, key=lambda r: r.conversation_id):
            conversation = conversations.get(tenant_id, conversation_id, now=now)
            for record in rated:
                on_record()
                if conversation is None or not conversation.complete:
                    counts.conversation_gone += 1
                elif row := _row(record, conversation):
                    counts.exported += 1
                    yield row
                else:
                    counts.answer_replaced += 1


def _row(record: FeedbackRecord, conversation: Conversation) -> FeedbackRow | None:
    messages = conversation.messages
    if record.message_index >= len(messages) or not record.rates(answer := messages[record.message_index]):
        return None
    return FeedbackRow(
        id=row_id(record),
        tenant_id=record.tenant_id,
        conversation_id=record.conversation_id,
        message_index=record.message_index,
        rating=record.rating,
        comment=record.comment,
        prompt=render(conversation.render_version, history := conversation.path(record.message_index)[:-1], []),
        messages=[{"role": m.role, "content": m.content} for m in history],
        answer=answer.content,
        finish_reason=answer.finish_reason,
        model=record.model,
        model_source=record.model_source,
        policy_versions=PolicyVersions(pre=record.pre_policy_version, post=record.post_policy_version),
        render_version=conversation.render_version,
        answered_at=to_iso(answer.created_at),
        rated_at=to_iso(record.created_at),
    )


def golden_candidate(row: FeedbackRow) -> GoldenCandidate:
    return GoldenCandidate(id=row.id, messages=row.messages, answer=row.answer, comment=row.comment)

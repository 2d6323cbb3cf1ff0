"""Give, list and remove ratings of a stored conversation's assistant messages, for the calling tenant only.

Rules: the conversation must be live and the tenant's (else 404, as every conversation route); the index must name an
assistant message (else 400, param `message_index`); a rejected request changes nothing. A rating written while its
conversation was being deleted or erased is taken back, so no feedback outlives its conversation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from datetime import timedelta

from functions.accounts.auth import Caller
from functions.metrics.gateway import GatewayMetrics
from shared.errors import InvalidRequestError, NotFoundError
from shared.service_api.feedback_api import FeedbackCreate
from shared.storage.conversations import (
    Conversation,
    ConversationNotFoundError,
    ConversationStore,
    StoredMessage,
    StoreUnavailableError,
)
from shared.storage.feedback import FeedbackRecord, FeedbackStore, answer_digest
from shared.storage.ledger import LedgerStore
from shared.storage.timestamps import utc_now

log = logging.getLogger("fleetchat.feedback")

# For answers stored before messages recorded their model: a turn's ledger entry is written as its request ends,
# just after the answer is stored (a stream) or just before it (a whole answer).
LEDGER_WINDOW = (timedelta(seconds=-2), timedelta(seconds=60))
CurrentPolicies = Callable[[], tuple[str | None, str | None]]  # (pre-filter, post-filter) policy versions in force


class FeedbackNotFoundError(NotFoundError):
    default_code = "feedback_not_found"


def _no_feedback(conversation_id: str, index: int) -> FeedbackNotFoundError:
    return FeedbackNotFoundError(
        f"Message {index} of conversation '{conversation_id}' has no feedback.", param="message_index"
    )


def rated_message(conversation: Conversation, index: int) -> StoredMessage:
    """The assistant message at `index`, or a 400 naming `message_index`."""
    if not conversation.complete:  # a torn read: the index cannot be checked now
        raise StoreUnavailableError("The stored conversation is incomplete right now; try again shortly.")
    count = len(conversation.messages)
    if index >= count:
        raise InvalidRequestError(
            f"message_index {index} is out of range: the conversation has {count} messages (0 to {count - 1}).",
            param="message_index",
            code="invalid_value",
        )
    message = conversation.messages[index]
    if message.role != "assistant":
        raise InvalidRequestError(
            f"message_index {index} is a {message.role} message; only assistant messages take feedback.",
            param="message_index",
            code="invalid_value",
        )
    return message


class FeedbackService:
    def __init__(
        self,
        conversations: ConversationStore,
        feedback: FeedbackStore,
        ledger: LedgerStore | None,
        policies: CurrentPolicies,
        metrics: GatewayMetrics,
        chat_pools: Collection[str],
    ) -> None:
        self.conversations = conversations
        self.feedback = feedback
        self.ledger = ledger
        self.policies = policies
        self.metrics = metrics
        self.chat_pools = frozenset(chat_pools)  # the ledger's other models (moderations) never answered a chat

    def give(self, caller: Caller, conversation_id: str, index: int, body: FeedbackCreate) -> FeedbackRecord:
        tenant_id = caller.tenant.id
        message = rated_message(self._live(tenant_id, conversation_id), index)
        if message.model is not None:
            model, source = message.model, "message"
            pre, post = message.pre_policy_version, message.post_policy_version
        else:  # stored before messages recorded who answered them
            model = self._model_of(tenant_id, message)
            source = None if model is None else "ledger"
            pre, post = self.policies()
        record = FeedbackRecord(
            tenant_id=tenant_id,
            conversation_id=conversation_id,
            message_index=index,
            rating=body.rating,
            comment=body.comment,
            created_at=utc_now(),
            key_id=caller.key.id,
            message_created_at=message.created_at,
            answer_sha256=answer_digest(message.content),
            model=model,
            model_source=source,
            pre_policy_version=pre,
            post_policy_version=post,
        )
        replaced = self.feedback.put(record)
        try:
            gone = self.conversations.get(tenant_id, conversation_id) is None
        except StoreUnavailableError:  # the client is told 503: leave the stored rating as it was before
            self._take_back(record, replaced)
            raise
        if gone:  # deleted or erased meanwhile
            self._take_back(record, None)
            raise ConversationNotFoundError(conversation_id)
        self.metrics.feedback.labels(record.rating.value).inc()
        return record

    def _take_back(self, record: FeedbackRecord, replaced: FeedbackRecord | None) -> None:
        """Undo a `put` (restore the rating it replaced, if any); best effort when the store fails too."""
        try:
            if replaced is None:
                self.feedback.delete(record.tenant_id, record.conversation_id, record.message_index)
            else:
                self.feedback.put(replaced)
        except StoreUnavailableError:
            log.warning("feedback store unavailable: a refused rating could not be taken back")

    def one(self, tenant_id: str, conversation_id: str, index: int) -> FeedbackRecord:
        """The current rating of the assistant message at `index`, or 404 `feedback_not_found`."""
        message = rated_message(self._live(tenant_id, conversation_id), index)
        record = self.feedback.get(tenant_id, conversation_id, index)
        if record is None or not record.rates(message):  # none, or one of an answer replaced since
            raise _no_feedback(conversation_id, index)
        return record

    def current(self, tenant_id: str, conversation_id: str) -> list[FeedbackRecord]:
        """The ratings of the conversation's messages as they are now (those of replaced answers left out)."""
        messages = self._live(tenant_id, conversation_id).messages
        return [
            record
            for record in self.feedback.list_conversation(tenant_id, conversation_id)
            if record.message_index < len(messages) and record.rates(messages[record.message_index])
        ]

    def remove(self, tenant_id: str, conversation_id: str, index: int) -> None:
        """Remove the current rating; a rating of an answer replaced since is not this message's (404, kept for the
        sweep to remove with the conversation)."""
        self.one(tenant_id, conversation_id, index)
        if not self.feedback.delete(tenant_id, conversation_id, index):
            raise _no_feedback(conversation_id, index)
        self.metrics.feedback_removed.inc()

    def _live(self, tenant_id: str, conversation_id: str) -> Conversation:
        conversation = self.conversations.get(tenant_id, conversation_id)
        if conversation is None:
            raise ConversationNotFoundError(conversation_id)
        return conversation

    def _model_of(self, tenant_id: str, message: StoredMessage) -> str | None:
        """The model that answered an answer stored without it: the one chat model in the tenant's ledger around the
        answer's time, or None when there were several (concurrent requests) or none (the ledger was spooled, or is
        down). Ledger rows of other models (`moderation:…`) are not chat answers and are skipped."""
        if self.ledger is None:
            return None
        start, end = (message.created_at + offset for offset in LEDGER_WINDOW)
        try:
            models = {row.model for row in self.ledger.usage(tenant_id, start, end) if row.model in self.chat_pools}
        except StoreUnavailableError:
            log.warning("ledger unavailable: feedback recorded without its model")
            return None
        return models.pop() if len(models) == 1 else None

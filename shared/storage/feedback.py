"""The storage contract for answer feedback (thumbs up/down with an optional comment): records and `FeedbackStore`.

One record per (tenant, conversation, message index): a second rating of the same message replaces the first.
A record holds no conversation content but the comment: the prompt and the answer are read from the conversation
store at export time, so retention and erasure of a conversation cover its content once. `answer_sha256` and
`message_created_at` say which answer was rated; when an edit or a regenerate has replaced the message at that index
since, the record is stale (`FeedbackRecord.rates`) and is neither listed as current nor exported.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any, Literal, Protocol

from pydantic import AwareDatetime, BaseModel, Field

from shared.storage.conversations import CONVERSATION_ID_RE, StoredMessage
from shared.storage.timestamps import from_iso, to_iso

MAX_COMMENT_CHARS = 2000
# Message indices are stored zero-padded so that they sort as numbers (a conversation never holds this many).
INDEX_DIGITS = 6
MAX_MESSAGE_INDEX = 10**INDEX_DIGITS - 1
_TIMES = ("created_at", "message_created_at")


class Rating(StrEnum):
    UP = "up"
    DOWN = "down"


class FeedbackRecord(BaseModel):
    tenant_id: str = Field(min_length=1, max_length=200)
    conversation_id: str = Field(pattern=CONVERSATION_ID_RE.pattern)
    message_index: int = Field(ge=0, le=MAX_MESSAGE_INDEX)  # as GET /v1/conversations/{id} lists the messages
    rating: Rating
    comment: str | None = Field(default=None, max_length=MAX_COMMENT_CHARS)
    created_at: AwareDatetime  # when this rating was given (a replacement has its own time)
    key_id: str | None = None  # the API key (or the session's key) that gave it
    # Which answer was rated: its stored time and a digest of its text.
    message_created_at: AwareDatetime
    answer_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    # The model that answered (`model_source`): "message" when the stored answer records it; for answers stored
    # before messages kept it, "ledger": the one chat model in the tenant's ledger at the answer's time, if exactly
    # one answered the tenant then.
    model: str | None = None
    model_source: Literal["message", "ledger"] | None = None
    # The safety policies of the answer's turn as the stored answer records them; for older answers, those in force
    # when the feedback was given (policies change only with a deploy).
    pre_policy_version: str | None = None
    post_policy_version: str | None = None

    def stored_fields(self) -> dict[str, Any]:
        """The record as a store keeps it: JSON values, times as fixed-width ISO strings (they sort as text).

        The record is validated again first (a mutated or `model_construct`ed record is refused, and so is a naive
        time), so bad input raises before anything is written."""
        record = FeedbackRecord.model_validate(self.model_dump())
        fields = record.model_dump(mode="json", exclude=set(_TIMES))
        return {**fields, **{name: to_iso(getattr(record, name)) for name in _TIMES}}

    @classmethod
    def from_stored(cls, fields: Mapping[str, Any]) -> FeedbackRecord:
        """The record from `stored_fields` as read back (absent optional fields are None)."""
        values = {name: fields.get(name) for name in cls.model_fields}
        return cls(**{**values, **{name: from_iso(fields[name]) for name in _TIMES}})

    def rates(self, message: StoredMessage) -> bool:
        """Whether this record is about `message` (and not an earlier answer at the same index)."""
        return (
            message.role == "assistant"
            and message.created_at == self.message_created_at
            and answer_digest(message.content) == self.answer_sha256
        )


def answer_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class FeedbackStore(Protocol):
    """Tenant-scoped feedback storage. Every read and delete takes the tenant id; another tenant's finds nothing.

    Adapters raise `StoreUnavailableError` when the backend is down, and validate a record before writing it, so a
    bad record raises before anything changes.
    """

    def put(self, record: FeedbackRecord) -> FeedbackRecord | None:
        """Write durably, replacing the record of the same (tenant, conversation, index); the one replaced, if any."""
        ...

    def get(self, tenant_id: str, conversation_id: str, message_index: int) -> FeedbackRecord | None: ...

    def list_conversation(self, tenant_id: str, conversation_id: str) -> list[FeedbackRecord]:
        """The conversation's records by message index (stale ones included: the caller knows the messages)."""
        ...

    def list_tenant(self, tenant_id: str) -> Iterator[FeedbackRecord]:
        """Every record of the tenant, by conversation id then message index."""
        ...

    def tenants(self) -> list[str]:
        """The tenants that have (or recently had) feedback, sorted; for exports across tenants."""
        ...

    def delete(self, tenant_id: str, conversation_id: str, message_index: int) -> bool:
        """Remove one record; False if there was none."""
        ...

    def delete_conversation(self, tenant_id: str, conversation_id: str) -> int:
        """Remove every record of the conversation (the sweep, with the conversation); how many. Idempotent."""
        ...

    def erase_tenant(self, tenant_id: str) -> int:
        """Remove every record of the tenant (account erase); how many. Idempotent."""
        ...

    def close(self) -> None: ...

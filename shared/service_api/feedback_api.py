"""Wire models of the feedback endpoints (`/v1/conversations/{id}/messages/{index}/feedback`); times: Unix seconds."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.storage.feedback import MAX_COMMENT_CHARS, FeedbackRecord, Rating


class FeedbackCreate(BaseModel):
    """A rating of one assistant message; `comment` is optional (blank counts as none)."""

    model_config = ConfigDict(extra="forbid")

    rating: Rating
    comment: str | None = Field(default=None, max_length=MAX_COMMENT_CHARS)

    @field_validator("comment")
    @classmethod
    def _blank_is_none(cls, comment: str | None) -> str | None:
        return comment.strip() or None if comment is not None else None


class FeedbackObject(BaseModel):
    object: Literal["conversation.message.feedback"] = "conversation.message.feedback"
    conversation_id: str
    message_index: int
    rating: Rating
    comment: str | None
    created_at: int
    model: str | None = Field(description="The model that answered, where the service could tell; else null.")

    @classmethod
    def of(cls, record: FeedbackRecord) -> FeedbackObject:
        return cls(
            conversation_id=record.conversation_id,
            message_index=record.message_index,
            rating=record.rating,
            comment=record.comment,
            created_at=int(record.created_at.timestamp()),
            model=record.model,
        )


class FeedbackList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FeedbackObject]


class FeedbackDeleted(BaseModel):
    object: Literal["conversation.message.feedback.deleted"] = "conversation.message.feedback.deleted"
    conversation_id: str
    message_index: int
    deleted: bool = True

"""Wire models of share links: `/v1/conversations/{id}/shares`, `/v1/shares/{id}` and the public `/v1/shared/{token}`
(docs/conversations.md, "Share links"); times are Unix seconds."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.storage.shares import DEFAULT_SHARE_DAYS, MAX_SHARE_DAYS, Share


class ShareCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    expires_in_days: int = Field(default=DEFAULT_SHARE_DAYS, ge=1, le=MAX_SHARE_DAYS)
    acknowledge_pii: bool = Field(
        default=False,
        description="Share even though the snapshot holds personal data (emails, phone numbers, card numbers, keys): "
        "without it such a share is refused with `pii_in_share`, naming what was found where.",
    )


class ShareObject(BaseModel):
    id: str
    object: Literal["conversation.share"] = "conversation.share"
    conversation_id: str
    title: str | None
    message_count: int
    created_at: int
    expires_at: int
    url: str | None = Field(
        default=None,
        description="The link (a path on this service): returned once, when it is made; the service keeps only a hash.",
    )

    @classmethod
    def of(cls, share: Share, url: str | None = None) -> ShareObject:
        return cls(
            id=share.id, conversation_id=share.conversation_id, title=share.title, message_count=len(share.messages),
            created_at=int(share.created_at.timestamp()), expires_at=int(share.expires_at.timestamp()), url=url,
        )  # fmt: skip


class ShareList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ShareObject]


class ShareDeleted(BaseModel):
    id: str
    object: Literal["conversation.share.deleted"] = "conversation.share.deleted"
    deleted: bool = True


class SharedMessageObject(BaseModel):
    role: Literal["user", "assistant"]
    content: str
    created_at: int


class SharedConversation(BaseModel):
    """What a share link shows: the snapshot, read-only."""

    object: Literal["shared.conversation"] = "shared.conversation"
    title: str | None
    messages: list[SharedMessageObject]
    created_at: int
    expires_at: int

    @classmethod
    def of(cls, share: Share) -> SharedConversation:
        messages = [
            SharedMessageObject(role=m.role, content=m.content, created_at=int(m.created_at.timestamp()))
            for m in share.messages
        ]
        return cls(
            title=share.title, messages=messages, created_at=int(share.created_at.timestamp()),
            expires_at=int(share.expires_at.timestamp()),
        )  # fmt: skip

"""Share links: read-only snapshots of a conversation's active branch at an unguessable, expiring, revocable URL.

A share keeps a copy of the messages as they were when it was made (later turns do not change it) and is found by the
SHA-256 of its URL token: the token itself is never stored, so a copy of the store opens no link. Revoking deletes
the share (its URL is a 404 from then on); so does deleting the conversation or erasing the account.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import datetime
from typing import Literal, Protocol

from pydantic import BaseModel, Field

MAX_SHARE_DAYS = 365
DEFAULT_SHARE_DAYS = 30
TOKEN_BYTES = 24  # 192 bits: unguessable
MAX_SNAPSHOT_BYTES = 350_000  # the messages as JSON: within a DynamoDB item (400 KB) with room for the rest


def new_share_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_share_id() -> str:
    return f"shr_{uuid.uuid4().hex}"


class SharedMessage(BaseModel):
    role: Literal["user", "assistant"]
    content: str
    created_at: datetime


class Share(BaseModel):
    id: str = Field(pattern=r"^shr_[0-9a-f]{32}$")
    tenant_id: str
    conversation_id: str
    title: str | None = None
    messages: list[SharedMessage]
    created_at: datetime
    expires_at: datetime

    def live_at(self, now: datetime) -> bool:
        return self.expires_at > now


class ShareStore(Protocol):
    """Share links, tenant-scoped for their owner and found by token hash for a reader."""

    def create(self, share: Share, token_digest: str) -> None:
        """Keep `share` under the SHA-256 of its token."""
        ...

    def by_token(self, token_digest: str) -> Share | None:
        """The share a token opens (expired ones too: the caller checks), or None (never made, revoked, deleted)."""
        ...

    def list_conversation(self, tenant_id: str, conversation_id: str) -> list[Share]:
        """The conversation's shares, oldest first."""
        ...

    def revoke(self, tenant_id: str, share_id: str) -> bool:
        """Delete the tenant's share; False if it has none by that id."""
        ...

    def delete_conversation(self, tenant_id: str, conversation_id: str) -> int:
        """Delete every share of the conversation; how many."""
        ...

    def erase_tenant(self, tenant_id: str) -> int:
        """Delete every share of the tenant; how many."""
        ...

    def close(self) -> None: ...

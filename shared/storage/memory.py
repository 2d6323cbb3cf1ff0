"""Memory: the facts a user asked the service to remember across conversations, kept with their account.

Opt-in (`enabled`, off by default) and user-visible: the user lists, adds, edits and deletes every item; nothing is
saved behind their back. While enabled, the items end the system prompt of the account's stored conversations after
its custom instructions (functions/chat/memory.py), so the same items render to the same bytes on every turn.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, Field

from shared.storage.timestamps import utc_now

MAX_MEMORY_ITEMS = 50
MAX_MEMORY_CHARS = 300  # one fact


class MemoryItem(BaseModel):
    id: str = Field(pattern=r"^mem_[0-9a-f]{32}$")
    text: str = Field(min_length=1, max_length=MAX_MEMORY_CHARS)
    created_at: datetime
    updated_at: datetime

    @classmethod
    def new(cls, text: str) -> MemoryItem:
        now = utc_now()
        return cls(id=f"mem_{uuid.uuid4().hex}", text=text, created_at=now, updated_at=now)


class Memory(BaseModel):
    """An account's memory: whether it is used, and its items (oldest first)."""

    enabled: bool = False
    items: list[MemoryItem] = Field(default_factory=list, max_length=MAX_MEMORY_ITEMS)

    def in_use(self) -> list[str]:
        """The texts a prompt renders: none while memory is off."""
        return [item.text for item in self.items] if self.enabled else []

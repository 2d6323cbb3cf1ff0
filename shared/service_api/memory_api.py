"""Wire models of `/v1/account/memory`: the facts an account asked to be remembered across conversations."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.storage.memory import MAX_MEMORY_CHARS, MAX_MEMORY_ITEMS, Memory, MemoryItem


class MemoryItemObject(BaseModel):
    id: str
    object: Literal["account.memory.item"] = "account.memory.item"
    text: str
    created_at: int
    updated_at: int

    @classmethod
    def of(cls, item: MemoryItem) -> MemoryItemObject:
        created, updated = int(item.created_at.timestamp()), int(item.updated_at.timestamp())
        return cls(id=item.id, text=item.text, created_at=created, updated_at=updated)


class MemoryObject(BaseModel):
    object: Literal["account.memory"] = "account.memory"
    enabled: bool = Field(description="Whether the items are used: they end the system prompt of every stored chat.")
    items: list[MemoryItemObject] = Field(description="Oldest first.")
    max_items: int = MAX_MEMORY_ITEMS

    @classmethod
    def of(cls, memory: Memory | None) -> MemoryObject:
        memory = memory or Memory()
        return cls(enabled=memory.enabled, items=[MemoryItemObject.of(item) for item in memory.items])


class MemorySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    enabled: bool


class MemoryText(BaseModel):
    """A fact to remember (new or edited)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str = Field(min_length=1, max_length=MAX_MEMORY_CHARS)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        text = " ".join(text.split())
        if not text:
            raise ValueError("text must not be blank")
        return text


class MemoryItemDeleted(BaseModel):
    id: str
    object: Literal["account.memory.item.deleted"] = "account.memory.item.deleted"
    deleted: bool = True

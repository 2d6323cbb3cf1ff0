"""The conversation search index contract (`ConversationSearchIndex`): the text of a tenant's stored messages, every
branch, found by words (BM25), so a user can search everything they have said and been told, not only titles.

The index is derived data: the conversation store stays the record. `IndexedConversationStore`
(shared/storage/indexed_conversations.py) feeds it from every turn, rename-free (titles are matched where they are
listed), and removes a conversation's rows when the conversation is deleted or swept; an account's erasure drops the
tenant's whole table. `indexed_through` lets a repair pass find conversations whose last turns never reached the index
(a gateway killed between its commit and the index write) and index them again.

One adapter, two homes, the engine the vector stores already run (shared/storage/lance_conversation_search.py):
LanceDB, a table per tenant, in the data dir locally and under the conversations bucket deployed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Protocol

from pydantic import BaseModel, Field

from shared.storage.conversations import StoredMessage

# What a search reads: what the user wrote and what they were answered. System and developer messages are the
# client's configuration; tool messages are machine output; neither is what a person searches their chats for.
SEARCHED_ROLES = ("user", "assistant")


class SearchableMessage(BaseModel):
    """One stored message as the index keeps it."""

    message_id: int = Field(ge=0)
    role: str
    text: str
    created_at: datetime


class MessageHit(BaseModel):
    """A message the words were found in, best first (`score`: BM25, higher is better)."""

    conversation_id: str
    message_id: int
    role: str
    text: str
    created_at: datetime
    score: float


def searchable(messages: Sequence[StoredMessage], first_id: int) -> list[SearchableMessage]:
    """The messages worth indexing of a run stored from id `first_id` on: user and assistant messages with text."""
    return [
        SearchableMessage(message_id=first_id + offset, role=m.role, text=m.content, created_at=m.created_at)
        for offset, m in enumerate(messages)
        if m.role in SEARCHED_ROLES and m.content.strip()
    ]


class ConversationSearchIndex(Protocol):
    def add(
        self,
        tenant_id: str,
        conversation_id: str,
        messages: Sequence[SearchableMessage],
        *,
        through: int,
        from_id: int | None = None,
    ) -> None:
        """Index `messages` of the conversation, which now stores `through` messages. `from_id`: first remove the
        conversation's rows from that id on (a rewritten tail, or a whole conversation indexed again with 0).
        Idempotent: a message indexed twice is one row."""
        ...

    def remove_conversation(self, tenant_id: str, conversation_id: str) -> None:
        """Every row of the conversation goes (deleted, expired or purged)."""
        ...

    def drop_tenant(self, tenant_id: str) -> None:
        """The tenant's whole index goes, its files at once (account erasure)."""
        ...

    def search(self, tenant_id: str, text: str, limit: int) -> list[MessageHit]:
        """The tenant's messages that hold the words, best first; only this tenant's rows are read."""
        ...

    def indexed_through(self, tenant_id: str) -> dict[str, int]:
        """Per indexed conversation of the tenant, how many of its stored messages the index has seen."""
        ...

    def tenants(self) -> Iterator[str]:
        """Every tenant with an index."""
        ...

    def maintain(self, tenant_id: str) -> int:
        """Compact the tenant's table and bring its BM25 index up to date; returns its row count."""
        ...

    def close(self) -> None: ...

"""`IndexedConversationStore`: a conversation store that keeps the conversation search index in step with it.

Every path that changes conversations goes through the store (the chat pipeline, the Responses API, the retention
sweep, account erasure), so feeding the index here reaches all of them. The store stays the record; index writes
happen after the store's write succeeded, on one background thread per process (in order), so a turn never waits on
the index and an index that is down never fails a turn. A write lost on the way (the process killed after its commit,
the index unreachable) is found by `repair` (the maintenance job): conversations the index has seen fewer messages of
than the store holds are indexed again, and indexed conversations that are no longer live are removed.

Account erasure is the exception: the tenant's index is dropped before `erase_tenant` returns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from shared.storage.conversation_search import ConversationSearchIndex, searchable
from shared.storage.conversations import (
    AuditRecord,
    Conversation,
    ConversationMeta,
    ConversationPage,
    ConversationStore,
    StoredMessage,
    SweepCandidate,
)

log = logging.getLogger("fleetchat.conversations")


class Repaired(BaseModel):
    """What one repair pass over a tenant's index did."""

    reindexed: int = 0  # conversations whose missing messages were indexed
    removed: int = 0  # indexed conversations that were no longer live


class IndexedConversationStore:
    """`ConversationStore` over `store`, feeding `index`. `background=False` writes the index inline (tools, tests)."""

    def __init__(self, store: ConversationStore, index: ConversationSearchIndex, *, background: bool = True) -> None:
        self.store = store
        self.index = index
        self._feed = ThreadPoolExecutor(1, thread_name_prefix="conversation-search") if background else None
        self.failed_writes = 0

    # -- the index feed -----------------------------------------------------------------------------------------

    def _later(self, write: Callable[[], None]) -> None:
        if self._feed is None:
            self._write(write)
            return
        try:
            self._feed.submit(self._write, write)
        except RuntimeError:  # closed (the process is stopping): the repair pass indexes it later
            self.failed_writes += 1
            log.warning("a conversation search index write came after the store closed; the maintenance job repairs it")

    def _write(self, write: Callable[[], None]) -> None:
        try:
            write()
        except Exception:  # the store has the turn; the repair pass indexes it later
            self.failed_writes += 1
            log.warning("a conversation search index write failed; the maintenance job repairs it", exc_info=True)

    def flush(self) -> None:
        """Wait until every index write queued so far is done."""
        if self._feed is not None:
            self._feed.submit(lambda: None).result()

    # -- writes that change what is searchable ------------------------------------------------------------------

    def append_turn(
        self,
        tenant_id: str,
        conversation_id: str,
        *,
        expected_version: int,
        messages: list[StoredMessage],
        expires_at: datetime | None,
        render_version: int,
        title: str | None = None,
        now: datetime | None = None,
        loaded: Conversation | None = None,
        keep: int | None = None,
        parent: int | None = None,
    ) -> ConversationMeta:
        meta = self.store.append_turn(
            tenant_id, conversation_id, expected_version=expected_version, messages=messages, expires_at=expires_at,
            render_version=render_version, title=title, now=now, loaded=loaded, keep=keep, parent=parent,
        )  # fmt: skip
        first_id = keep if keep is not None else meta.message_count - len(messages)
        found = searchable(messages, first_id)
        through = meta.message_count
        self._later(lambda: self.index.add(tenant_id, conversation_id, found, through=through, from_id=keep))
        return meta

    def soft_delete(self, tenant_id: str, conversation_id: str, *, now: datetime | None = None) -> bool:
        deleted = self.store.soft_delete(tenant_id, conversation_id, now=now)
        if deleted:
            self._later(lambda: self.index.remove_conversation(tenant_id, conversation_id))
        return deleted

    def hard_delete(self, tenant_id: str, conversation_id: str, audit: AuditRecord) -> bool:
        deleted = self.store.hard_delete(tenant_id, conversation_id, audit)
        self._later(lambda: self.index.remove_conversation(tenant_id, conversation_id))
        return deleted

    def erase_tenant(self, tenant_id: str, audit: AuditRecord) -> int:
        erased = self.store.erase_tenant(tenant_id, audit)
        self.flush()  # a queued write of this tenant must not make its table again after the drop
        self.index.drop_tenant(tenant_id)
        return erased

    # -- repair ---------------------------------------------------------------------------------------------------

    def repair(self, tenant_id: str, *, now: datetime | None = None) -> Repaired:
        """Index what the index missed of the tenant's live conversations, and remove what is no longer live. Reads
        the listing (records only); a conversation's messages only where the index is behind."""
        self.flush()
        indexed = self.index.indexed_through(tenant_id)
        report = Repaired()
        live: set[str] = set()
        cursor: str | None = None
        while True:
            page = self.store.list(tenant_id, limit=100, cursor=cursor, now=now)
            for meta in page.items:
                live.add(meta.id)
                if indexed.get(meta.id, 0) >= meta.message_count:
                    continue
                conversation = self.store.get(tenant_id, meta.id, now=now)
                if conversation is None or not conversation.complete:
                    continue  # gone meanwhile, or mid-write: the next pass sees it settled
                found = searchable(conversation.messages, 0)
                self.index.add(tenant_id, meta.id, found, through=len(conversation.messages), from_id=0)
                report.reindexed += 1
            if (cursor := page.next_cursor) is None:
                break
        for conversation_id in indexed.keys() - live:
            self.index.remove_conversation(tenant_id, conversation_id)
            report.removed += 1
        return report

    # -- everything else is the store's --------------------------------------------------------------------------

    def get(self, tenant_id: str, conversation_id: str, *, now: datetime | None = None) -> Conversation | None:
        return self.store.get(tenant_id, conversation_id, now=now)

    def get_meta(self, tenant_id: str, conversation_id: str, *, now: datetime | None = None) -> ConversationMeta | None:
        return self.store.get_meta(tenant_id, conversation_id, now=now)

    def list(
        self, tenant_id: str, *, limit: int = 20, cursor: str | None = None, now: datetime | None = None
    ) -> ConversationPage:
        return self.store.list(tenant_id, limit=limit, cursor=cursor, now=now)

    def rename(
        self, tenant_id: str, conversation_id: str, title: str, *, now: datetime | None = None
    ) -> ConversationMeta | None:
        return self.store.rename(tenant_id, conversation_id, title, now=now)

    def set_instructions(
        self, tenant_id: str, conversation_id: str, instructions: str | None, *, now: datetime | None = None
    ) -> ConversationMeta | None:
        return self.store.set_instructions(tenant_id, conversation_id, instructions, now=now)

    def set_current_node(
        self, tenant_id: str, conversation_id: str, node: int, *, now: datetime | None = None
    ) -> ConversationMeta | None:
        return self.store.set_current_node(tenant_id, conversation_id, node, now=now)

    def reschedule(self, tenant_id: str, conversation_id: str, expires_at: datetime | None) -> None:
        self.store.reschedule(tenant_id, conversation_id, expires_at)

    def sweep_candidates(self, now: datetime) -> Iterator[SweepCandidate]:
        return self.store.sweep_candidates(now)

    def is_stored(self, tenant_id: str, conversation_id: str) -> bool:
        return self.store.is_stored(tenant_id, conversation_id)

    def export_tenant(self, tenant_id: str, *, now: datetime | None = None) -> Iterator[Conversation]:
        return self.store.export_tenant(tenant_id, now=now)

    def audit_log(self, *, limit: int = 100) -> list[AuditRecord]:
        return self.store.audit_log(limit=limit)

    def __getattr__(self, name: str) -> Any:  # an adapter's own extras (its config, its path)
        if name == "store":
            raise AttributeError(name)
        return getattr(self.store, name)

    def close(self) -> None:
        if self._feed is not None:
            self._feed.shutdown(wait=True)  # what was queued is written before the process goes
        self.index.close()
        self.store.close()


def search_index_of(store: ConversationStore) -> ConversationSearchIndex | None:
    """The search index a store feeds; None for a plain store (one a test or a tool opened by itself)."""
    return store.index if isinstance(store, IndexedConversationStore) else None

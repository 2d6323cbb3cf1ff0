"""Full-text search over a tenant's own conversations: every stored message of every branch, found by the search
index (BM25 on LanceDB), only live conversations answered, each hit a snippet with its matched words marked."""

from __future__ import annotations

from datetime import datetime

from functions.accounts.search_highlight import matches, query_terms, search_text, snippet
from shared.service_api.conversation_api import ConversationSearchHit, ConversationSearchResults
from shared.storage.conversation_search import ConversationSearchIndex
from shared.storage.conversations import ConversationMeta, ConversationStore, StoreUnavailableError

# Hits read from the index per hit answered: the index may hold rows of conversations deleted a moment ago (their
# removal is queued) or expired (the sweep removes them); those are skipped, not counted.
_OVERREAD = 3


class ConversationSearch:
    def __init__(self, conversations: ConversationStore, index: ConversationSearchIndex | None) -> None:
        self.conversations = conversations
        self.index = index

    def search(
        self, tenant_id: str, query: str, limit: int, *, now: datetime | None = None
    ) -> ConversationSearchResults:
        if self.index is None:
            raise StoreUnavailableError("Conversation search is not available on this gateway.")
        terms = query_terms(query)
        hits = self.index.search(tenant_id, search_text(query), limit * _OVERREAD) if terms else []
        metas: dict[str, ConversationMeta | None] = {}
        found: list[ConversationSearchHit] = []
        for hit in hits:
            if hit.conversation_id not in metas:
                metas[hit.conversation_id] = self.conversations.get_meta(tenant_id, hit.conversation_id, now=now)
            meta = metas[hit.conversation_id]
            if meta is None or hit.message_id >= meta.message_count:
                continue  # deleted, expired, or a tail rewritten since
            text, spans = snippet(hit.text, matches(hit.text, terms))
            found.append(ConversationSearchHit.of(meta, hit, text, spans))
            if len(found) == limit:
                break
        return ConversationSearchResults(query=query, data=found)

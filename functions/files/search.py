"""Search of one vector store (the call H4's retrieval builds on): embed the query through the embedding service,
ask the store's index for the nearest chunks, keep those of files still attached and completed, name their files.

    hits = await app.state.vector_search.search(caller, "vs_…", "how do I reset my password?", k=10)
    hits[0].file_id, hits[0].filename, hits[0].chunk_id, hits[0].text, hits[0].start, hits[0].end, hits[0].score

`embed_query` embeds once for several stores; `keyword_search` ranks a store's chunks by BM25 (the index's full-text
search). Another tenant's store is a 404 (NotFoundError). A `filters` (OpenAI's, over the files' attachment attributes)
keeps only chunks of the files that pass it (functions/files/filters.py), applied by the index before it ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol

import numpy as np
from anyio import to_thread
from pydantic import BaseModel

from functions.accounts.auth import Caller
from functions.files.backends import FileBackends
from functions.files.embedder import Embedder
from functions.files.filters import matches
from functions.files.vector_stores import DEFAULT_EMBEDDING_MODEL, store_not_found
from shared.errors import InvalidRequestError
from shared.storage.files import StoredVectorStore
from shared.storage.timestamps import utc_now
from shared.storage.vector_index import ChunkHit
from shared.wire.files_api import Attributes, Filter, SearchContent, SearchPage, SearchRequest, SearchResult

# How stale a store's `last_active_at` may be before a search writes it again (its expiry policy counts in days).
TOUCH_EVERY = timedelta(minutes=1)


class Ranked(Protocol):
    """Chat's hybrid retrieval (functions/retrieval/hybrid.py: HybridSearch), which the search endpoint's default
    ranker uses."""

    async def search(
        self, caller: Caller, refs: list[Any], question: str, count: int, *, filters: dict[str, Filter | None]
    ) -> list[Any]: ...


class SearchHit(ChunkHit):
    vector_store_id: str
    filename: str
    # The file's attributes as the search read them (the same read that found it live): the search page shows them
    # without reading the store's attachments again.
    attributes: Attributes | None = None


class StoreRef(BaseModel):
    """A vector store the caller may search, and the revision of its chunks (changes when they change)."""

    id: str
    name: str | None
    revision: str


class VectorStoreSearch:
    def __init__(self, backends: FileBackends, embedder: Embedder) -> None:
        self.backends = backends
        self.embedder = embedder

    async def _store(self, tenant_id: str, store_id: str) -> StoredVectorStore:
        store = await to_thread.run_sync(self.backends.files.get_vector_store, tenant_id, store_id)
        if store is None:
            raise store_not_found(store_id)
        return store

    async def embed_query(self, caller: Caller, text: str, model: str = DEFAULT_EMBEDDING_MODEL) -> np.ndarray:
        return (await self.embedder.embed(caller, model, [text]))[0]

    async def search(
        self, caller: Caller, vector_store_id: str, query_text: str, k: int = 10,
        query_vector: np.ndarray | None = None, filters: Filter | None = None,
    ) -> list[SearchHit]:  # fmt: skip
        store = await self._store(caller.tenant.id, vector_store_id)
        vector = query_vector if query_vector is not None else await self.embed_query(caller, query_text)
        return await to_thread.run_sync(self._search, store, vector, k, filters)

    def _search(
        self, store: StoredVectorStore, vector: np.ndarray, k: int, filters: Filter | None = None
    ) -> list[SearchHit]:
        found = self._ranked(store.tenant_id, store.id, filters, lambda files: self.backends.index.search(
            store.tenant_id, store.id, vector, k, file_ids=files))  # fmt: skip
        now = utc_now()
        if now - store.last_active_at >= TOUCH_EVERY:  # a store's expiry counts in days: no write on every search
            self.backends.files.touch_vector_store(store.tenant_id, store.id, now)
        return found

    def keyword_search(
        self, tenant_id: str, vector_store_id: str, text: str, k: int, filters: Filter | None = None
    ) -> list[SearchHit]:
        """The store's `k` chunks that best match `text` by BM25, best first (sync: call it in a worker thread)."""
        return self._ranked(tenant_id, vector_store_id, filters, lambda files: self.backends.index.keyword_search(
            tenant_id, vector_store_id, text, k, file_ids=files))  # fmt: skip

    def _ranked(
        self, tenant_id: str, store_id: str, filters: Filter | None, rank: Callable[[set[str] | None], list[ChunkHit]]
    ) -> list[SearchHit]:
        """`rank(files)`'s hits of the store's completed files that pass `filters`, with their file names. The index
        ranks only those files where some chunks are of others (a filter, a file still ingesting or being detached)."""
        b = self.backends
        states = b.files.attachment_states(tenant_id, store_id)
        live = {f for f, s in states.items() if s.status == "completed" and matches(filters, s.attributes)}
        if not live:
            return []
        # Every file of the store counts: no filter for the index to apply (a file detached a moment ago, its chunks
        # still going, is dropped below).
        found = [h for h in rank(None if len(live) == len(states) else live) if h.file_id in live]
        names: dict[str, str] = {}
        for hit in found:
            if hit.file_id not in names:
                record = b.files.get_file(tenant_id, hit.file_id)
                names[hit.file_id] = "" if record is None else record.filename
        return [
            SearchHit(**hit.model_dump(), vector_store_id=store_id, filename=names[hit.file_id],
                      attributes=states[hit.file_id].attributes or None)
            for hit in found
        ]  # fmt: skip

    async def require(self, caller: Caller, vector_store_id: str) -> StoreRef:
        """The caller's store, or the 404 (before any retrieval budget is spent)."""
        store = await self._store(caller.tenant.id, vector_store_id)
        revision = await to_thread.run_sync(self.backends.index.revision, store.tenant_id, store.id)
        return StoreRef(id=store.id, name=store.name or None, revision=revision)

    def vectors(self, tenant_id: str, vector_store_id: str, chunk_ids: list[str]) -> dict[str, np.ndarray]:
        """The normalised vectors of the named chunks of the store (sync); unknown ids are absent."""
        return self.backends.index.vectors(tenant_id, vector_store_id, chunk_ids)

    async def search_page(
        self, caller: Caller, vector_store_id: str, request: SearchRequest, hybrid: Ranked | None = None
    ) -> SearchPage:
        """`POST /v1/vector_stores/{id}/search`: each query searched (ranker `none`: by vector alone, best cosine
        first; otherwise chat's hybrid ranking, in its re-ranked order), a chunk kept once, `filters` and
        `ranking_options.score_threshold` applied."""
        queries = request.queries()
        store = await self._store(caller.tenant.id, vector_store_id)
        if not queries:
            raise InvalidRequestError("'query' must contain text.", param="query", code="invalid_value")
        limit, threshold = request.max_num_results, request.ranking_options.score_threshold
        if request.ranking_options.ranker == "none" or hybrid is None:
            best: dict[str, SearchHit] = {}
            vectors = await self.embedder.embed(caller, store.embedding_model, queries)
            for vector in vectors:
                for hit in await to_thread.run_sync(self._search, store, vector, limit, request.filters):
                    if hit.chunk_id not in best or best[hit.chunk_id].score < hit.score:
                        best[hit.chunk_id] = hit
            ranked = sorted(best.values(), key=lambda h: -h.score)
        else:
            ref = await self.require(caller, vector_store_id)
            seen: dict[str, SearchHit] = {}
            for query in queries:
                for passage in await hybrid.search(caller, [ref], query, limit, filters={ref.id: request.filters}):
                    hit = passage.hit.model_copy(update={"score": passage.score})
                    seen.setdefault(hit.chunk_id, hit)
            ranked = list(seen.values())
        ranked = [h for h in ranked if h.score >= threshold][:limit]
        data = [
            SearchResult(
                file_id=h.file_id,
                filename=h.filename,
                score=h.score,
                attributes=h.attributes or None,
                content=[SearchContent(text=h.text)],
                chunk_id=h.chunk_id,
                start_offset=h.start,
                end_offset=h.end,
            )
            for h in ranked
        ]
        return SearchPage(search_query=queries, data=data)

"""Hybrid search over one or more vector stores: the question embedded once, each store searched by vector and by
BM25 (both the index's own searches, shared/storage/lance_vector_index.py), the rankings fused by reciprocal rank, then
re-ranked with MMR diversity (functions/retrieval/fusion.py). The re-rank's relevance is pluggable: a re-rank pool
(`FLEETCHAT_RETRIEVAL_RERANK_MODEL`: a cross-encoder deployed, through functions/rerank_service.py) or, by default and
whenever that pool fails, the built-in (the passages' cosine to the question and their fused rank).

The stores are reached through `StoreSearch`, the files service's search (`app.state.vector_search`); this module
never reads an index itself, so it works the same over the embedded and the deployed index.

`filters` (OpenAI's, per store: a `file_search` tool's) keep only the chunks of files whose attributes pass them, in
both rankings; `score_threshold` drops passages whose cosine similarity to the question is below it; `weights`
(`embedding_weight`, `text_weight`: the tool's `ranking_options.hybrid_search`) weigh the two rankings in the fusion."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anyio
import numpy as np
from anyio import to_thread

from functions.accounts.auth import Caller
from functions.retrieval.fusion import maximal_marginal_relevance, normalised, reciprocal_rank_fusion
from shared.errors import FleetchatError
from shared.settings import RetrievalSettings
from shared.wire.files_api import Filter

log = logging.getLogger("fleetchat.retrieval")

# What the eval compares: each ranking alone, their fusion, and the fusion re-ranked (what chat uses).
Mode = Literal["vector", "keyword", "fused", "hybrid"]
# Share of the re-rank's relevance that comes from the fused rank (the rest: cosine similarity to the question), so
# a passage found by its exact words is not lost to the embedding's blind spots (names, numbers, codes).
FUSION_WEIGHT = 0.5


class StoreSearch(Protocol):
    """What retrieval needs of the files service (functions/files/search.py: VectorStoreSearch)."""

    async def require(self, caller: Caller, vector_store_id: str) -> Any:
        """The caller's store (with `id` and `revision`), or a 404 for any other tenant's or unknown id."""
        ...

    async def embed_query(self, caller: Caller, text: str) -> np.ndarray: ...

    async def search(
        self, caller: Caller, vector_store_id: str, query_text: str, k: int = 10,
        query_vector: np.ndarray | None = None, filters: Filter | None = None,
    ) -> list[Any]: ...  # fmt: skip

    def keyword_search(
        self, tenant_id: str, vector_store_id: str, text: str, k: int, filters: Filter | None = None
    ) -> list[Any]: ...

    def vectors(self, tenant_id: str, vector_store_id: str, chunk_ids: list[str]) -> dict[str, np.ndarray]: ...


@dataclass(frozen=True)
class Passage:
    hit: Any  # the store's hit: vector_store_id, file_id, filename, chunk_id, text, start, end
    # cosine similarity of passage and question (the fused score where no vector was found), or the re-rank pool's
    # relevance when one scored it
    score: float


class PassageReranker(Protocol):
    """A re-rank pool's scores (functions/rerank_service.py: RerankService)."""

    async def scores(self, caller: Caller, model: str, query: str, documents: list[str]) -> list[float]: ...


class HybridSearch:
    def __init__(
        self, stores: StoreSearch, settings: RetrievalSettings, reranker: PassageReranker | None = None
    ) -> None:
        self.stores = stores
        self.settings = settings
        self.reranker = reranker

    async def search(
        self, caller: Caller, refs: list[Any], question: str, count: int, mode: Mode = "hybrid", *,
        filters: Mapping[str, Filter | None] | None = None, score_threshold: float = 0.0,
        weights: tuple[float, float] = (1.0, 1.0),
    ) -> list[Passage]:  # fmt: skip
        """The `count` best passages of the stores `refs` (as `require` returned them) for `question`."""
        passages = await self._search(caller, refs, question, count, mode, filters or {}, weights)
        return [p for p in passages if p.score >= score_threshold]

    async def _search(
        self, caller: Caller, refs: list[Any], question: str, count: int, mode: Mode,
        filters: Mapping[str, Filter | None], weights: tuple[float, float],
    ) -> list[Passage]:  # fmt: skip
        k = max(self.settings.candidates, count)
        vector = None if mode == "keyword" else await self.stores.embed_query(caller, question)
        by_vector: list[Any] = []
        by_keyword: list[list[Any]] = []

        async def one_store(ref: Any) -> None:
            if vector is not None:
                only = filters.get(ref.id)
                found = await self.stores.search(caller, ref.id, question, k, query_vector=vector, filters=only)
                by_vector.extend(found)
            if mode != "vector":
                ranking = await to_thread.run_sync(
                    self.stores.keyword_search, caller.tenant.id, ref.id, question, k, filters.get(ref.id),
                    abandon_on_cancel=True,
                )  # fmt: skip
                by_keyword.append(ranking)

        async with anyio.create_task_group() as group:
            for ref in refs:
                group.start_soon(one_store, ref)
        # Cosine scores are comparable across stores (one model); BM25 scores are not (each store its own IDF), so
        # each store's keyword ranking enters the fusion as a ranking of its own.
        by_vector.sort(key=lambda hit: -hit.score)
        chunks = {hit.chunk_id: hit for hit in by_vector}
        for ranking in by_keyword:
            chunks.update({h.chunk_id: h for h in ranking if h.chunk_id not in chunks})
        rankings = [[hit.chunk_id for hit in by_vector]] + [[h.chunk_id for h in r] for r in by_keyword]
        scale = [weights[0]] + [weights[1]] * len(by_keyword)
        kept = [(r, w) for r, w in zip(rankings, scale, strict=True) if r]
        fused = reciprocal_rank_fusion([r for r, _ in kept], self.settings.rrf_k, [w for _, w in kept])
        if mode == "vector":
            return [Passage(hit, float(hit.score)) for hit in _unique(by_vector)[:count]]
        if mode in ("keyword", "fused"):
            return [Passage(chunks[c], score) for c, score in list(fused.items())[:count]]
        candidates = [chunks[c] for c in list(fused)[: max(3 * count, 10)]]
        assert vector is not None
        return await self._reranked(caller, candidates, fused, vector, count, question)

    async def _reranked(
        self, caller: Caller, candidates: list[Any], fused: dict[str, float], question: np.ndarray, count: int,
        question_text: str,
    ) -> list[Passage]:  # fmt: skip
        if not candidates:
            return []
        vectors = await to_thread.run_sync(self._vectors, caller.tenant.id, candidates, abandon_on_cancel=True)
        dims = len(question)
        matrix = np.stack([vectors.get(c.chunk_id, np.zeros(dims, dtype=np.float32)) for c in candidates])
        cosine = matrix @ np.asarray(question, dtype=np.float32)
        pool_scores = await self._pool_scores(caller, question_text, candidates)
        if pool_scores is not None:
            order = maximal_marginal_relevance(pool_scores, matrix, count, self.settings.mmr_lambda)
            return [Passage(candidates[i], float(pool_scores[i])) for i in order]
        rank_scores = np.array([fused[c.chunk_id] for c in candidates])
        relevance = (1 - FUSION_WEIGHT) * normalised(cosine) + FUSION_WEIGHT * normalised(rank_scores)
        order = maximal_marginal_relevance(relevance, matrix, count, self.settings.mmr_lambda)
        chosen = [candidates[i] for i in order]
        return [
            Passage(hit, float(cosine[i]) if hit.chunk_id in vectors else fused[hit.chunk_id])
            for i, hit in zip(order, chosen, strict=True)
        ]

    async def _pool_scores(self, caller: Caller, question: str, candidates: list[Any]) -> np.ndarray | None:
        """The re-rank pool's relevance of each candidate (in [0, 1]), or None: no pool configured, or it failed or
        refused (the built-in re-rank answers instead: a chat is never failed by its re-rank stage)."""
        model = self.settings.rerank_model
        if model is None or self.reranker is None:
            return None
        try:
            scores = await self.reranker.scores(caller, model, question, [c.text for c in candidates])
        except FleetchatError as exc:
            log.warning("re-rank pool %s failed (%s): the built-in re-rank answers", model, exc.message)
            return None
        return np.asarray(scores, dtype=np.float32)

    def _vectors(self, tenant_id: str, candidates: Iterable[Any]) -> dict[str, np.ndarray]:
        wanted: dict[str, list[str]] = {}
        for hit in candidates:
            wanted.setdefault(hit.vector_store_id, []).append(hit.chunk_id)
        found: dict[str, np.ndarray] = {}
        for store_id, ids in wanted.items():
            found.update(self.stores.vectors(tenant_id, store_id, ids))
        return {k: np.asarray(v, dtype=np.float32) for k, v in found.items()}


def _unique(hits: list[Any]) -> list[Any]:
    """One hit per chunk (a file attached to two stores is found in both)."""
    seen: set[str] = set()
    return [h for h in hits if not (h.chunk_id in seen or seen.add(h.chunk_id))]

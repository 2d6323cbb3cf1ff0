"""The local re-rank pool's scorer, the fused rank: the embedding model's cosine and BM25 over the documents of one
request, fused by reciprocal rank, for a cross-encoder none of the installed packages carries.

A document's `relevance_score` is the mean of its cosine similarity to the query (clipped at 0: MiniLM's cosine of an
unrelated pair is near 0, a close paraphrase near 0.8) and its fused rank scaled to [0, 1] (1: first by both), so
a passage that shares the query's rare words rises above one that is only near it in the embedding space, and a
score still says something on its own (a list of unrelated documents scores low throughout), unlike a rank alone.
Retrieval's own re-rank (functions/retrieval/hybrid.py) weighs the same two signals the same way.

BM25 (bm25s, Snowball-stemmed, English stop words) is computed over the request's documents alone: its IDF is the
request's, as any re-ranker sees only what it is sent. `FUSION_WEIGHT` and `RRF_K` are retrieval's values.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import cache
from typing import Any

import numpy as np

from shared.rank_fusion import reciprocal_rank_fusion

RRF_K = 60
FUSION_WEIGHT = 0.5  # the fused rank's share of the relevance (the rest: cosine)

Embed = Callable[[list[str]], Awaitable[np.ndarray]]


@cache
def _stemmer() -> Any:
    """The Snowball English stemmer, made once per process (not on every request)."""
    import Stemmer

    return Stemmer.Stemmer("english")


def bm25_scores(query: str, documents: list[str]) -> np.ndarray:
    """Each document's BM25 score for `query`, the statistics those of `documents` alone."""
    import bm25s  # the worker's own dependency (the local extra), imported where used

    stemmer = _stemmer()
    corpus = bm25s.tokenize(documents, stopwords="en", stemmer=stemmer, show_progress=False)
    terms = bm25s.tokenize([query], stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False)[0]
    if not corpus.vocab or not terms:
        return np.zeros(len(documents), dtype=np.float32)
    index = bm25s.BM25()
    index.index(corpus, show_progress=False)
    return np.asarray(index.get_scores(terms), dtype=np.float32)


def fused_relevance(query_vector: np.ndarray, document_vectors: np.ndarray, bm25: np.ndarray) -> np.ndarray:
    """Each document's relevance in [0, 1] from its cosine (rows L2-normalised) and its BM25 score."""
    cosine = document_vectors @ query_vector
    by_vector = [int(i) for i in np.argsort(-cosine, kind="stable")]
    by_keyword = [int(i) for i in np.argsort(-bm25, kind="stable") if bm25[i] > 0]  # no shared term: not ranked
    fused = reciprocal_rank_fusion([by_vector, by_keyword], RRF_K)
    best = 2.0 / (RRF_K + 1)
    rank_part = np.array([fused.get(i, 0.0) / best for i in range(len(cosine))], dtype=np.float32)
    return (1 - FUSION_WEIGHT) * np.clip(cosine, 0.0, 1.0) + FUSION_WEIGHT * rank_part


class FusedReranker:
    """Scores (query, document) pairs with the embedding worker's own model (its micro-batcher's `embed`)."""

    def __init__(self, embed: Embed) -> None:
        self.embed = embed

    async def scores(self, query: str, documents: list[str]) -> list[float]:
        vectors = await self.embed([query, *documents])
        bm25 = await asyncio.to_thread(bm25_scores, query, documents)
        return [float(s) for s in fused_relevance(vectors[0], vectors[1:], bm25)]

"""Combining rankings: reciprocal rank fusion of the keyword and vector rankings, then the re-rank (relevance by
embedding similarity of passage and question, diversity by maximal marginal relevance).

Why this re-rank: the passages' own MiniLM vectors are already in the index, so re-ranking by their cosine similarity
to the question costs one matrix product, and MMR keeps near-duplicate chunks (overlapping windows of one section)
from filling the context. A re-rank pool (functions/rerank_service.py; a cross-encoder deployed) can replace the
relevance (functions/retrieval/hybrid.py); on BEIR the built-in did better in this place (docs/retrieval-engines.md)."""

from __future__ import annotations

import numpy as np

from shared.rank_fusion import reciprocal_rank_fusion

__all__ = ["maximal_marginal_relevance", "normalised", "reciprocal_rank_fusion"]


def normalised(scores: np.ndarray) -> np.ndarray:
    """Scores scaled to [0, 1] (all equal: all 1)."""
    low, high = float(scores.min(initial=0.0)), float(scores.max(initial=0.0))
    if high - low <= 1e-12:
        return np.ones_like(scores)
    return (scores - low) / (high - low)


def maximal_marginal_relevance(relevance: np.ndarray, vectors: np.ndarray, count: int, lam: float) -> list[int]:
    """Indices of `count` candidates chosen greedily by lam * relevance - (1 - lam) * (highest similarity to one
    already chosen) (Carbonell and Goldstein 1998). `vectors` are L2-normalised rows; `relevance` in [0, 1]."""
    chosen: list[int] = []
    left = list(range(len(relevance)))
    similarity = vectors @ vectors.T if len(vectors) else np.zeros((0, 0))
    while left and len(chosen) < count:
        redundancy = similarity[np.ix_(left, chosen)].max(axis=1) if chosen else np.zeros(len(left))
        marginal = lam * relevance[left] - (1.0 - lam) * redundancy
        best = left[int(np.argmax(marginal))]
        chosen.append(best)
        left.remove(best)
    return chosen

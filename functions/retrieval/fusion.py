"""Combining rankings: reciprocal rank fusion of the keyword and vector rankings, then the re-rank (relevance by
embedding similarity of passage and question, diversity by maximal marginal relevance).

Why this re-rank: a cross-encoder (e.g. ms-marco-MiniLM) would judge each (question, passage) pair more finely, but
none ships in a PyPI package here and the gateway loads nothing from a model hub at run time. The passages' own
MiniLM vectors are already in the index, so re-ranking by their cosine similarity to the question costs one matrix
product, and MMR keeps near-duplicate chunks (overlapping windows of one section) from filling the context."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[str]], k: int = 60, weights: Sequence[float] | None = None
) -> dict[str, float]:
    """Each id's fused score: the sum over rankings of weight / (k + rank), rank from 1 (Cormack, Clarke and
    Buettcher, SIGIR 2009; every weight 1 unless given). Ids missing from a ranking get nothing from it. Highest
    first."""
    fused: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings), strict=True):
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + weight / (k + rank)
    return dict(sorted(fused.items(), key=lambda pair: (-pair[1], pair[0])))


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

"""Reciprocal rank fusion: several rankings of the same items made one, by rank alone (the scores of different
rankers are not comparable). Retrieval fuses its vector and keyword rankings with it (functions/retrieval/hybrid.py),
the local re-rank pool its cosine and BM25 rankings (gpu_workers/embeddings/fused_rerank.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

Item = TypeVar("Item", str, int)  # ids (retrieval's chunk ids) or positions (a re-rank request's documents)


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Item]], k: int = 60, weights: Sequence[float] | None = None
) -> dict[Item, float]:
    """Each id's fused score: the sum over rankings of weight / (k + rank), rank from 1 (Cormack, Clarke and
    Buettcher, SIGIR 2009; every weight 1 unless given). Ids missing from a ranking get nothing from it. Highest
    first (ties by id)."""
    fused: dict[Item, float] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings), strict=True):
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + weight / (k + rank)
    return dict(sorted(fused.items(), key=lambda pair: (-pair[1], pair[0])))

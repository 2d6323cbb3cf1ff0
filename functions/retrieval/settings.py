"""Retrieval's knobs (`FLEETCHAT_RETRIEVAL_*`): its latency budget, how many candidates each search returns, the
fusion and re-rank constants, and how much of a prompt passages may take."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class RetrievalSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FLEETCHAT_RETRIEVAL_", env_file=".env", env_ignore_empty=True, extra="ignore"
    )

    # The whole retrieval (embedding the question, every store's searches, the re-rank) must finish within this, or
    # the request is answered without passages and says so (x-fleetchat-retrieval: skipped). Sized for the CPU stack,
    # where embedding one question takes 20-900 ms depending on load; deployed (a GPU embedding pool) 300 ms is ample.
    budget_ms: int = Field(default=1500, ge=1, le=60_000)
    # Candidates taken from each store by each ranking (vector and BM25) before fusion.
    candidates: int = Field(default=20, ge=1, le=200)
    # Passages put into the prompt at most (a request's `max_num_results` may lower it).
    max_passages: int = Field(default=6, ge=1, le=50)
    # Reciprocal rank fusion constant (Cormack et al. 2009 use 60: it damps the weight of the very first ranks).
    rrf_k: int = Field(default=60, ge=1)
    # MMR trade-off between relevance to the question (1.0) and novelty against passages already chosen (0.0).
    mmr_lambda: float = Field(default=0.7, ge=0.0, le=1.0)
    # Passages never take more than this share of the pool's context window, whatever room the request leaves.
    max_context_share: float = Field(default=0.75, gt=0.0, le=1.0)
    # BM25 indexes kept in memory, one per (tenant, store, revision); least recently used ones are dropped.
    keyword_cache_stores: int = Field(default=64, ge=1)

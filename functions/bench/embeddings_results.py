"""The embeddings phase's results (functions/bench/embeddings_phase.py): what bench.json holds for it."""

from __future__ import annotations

from pydantic import BaseModel, Field


class EmbeddingLevel(BaseModel):
    label: str
    batch: int  # inputs per request
    concurrency: int  # requests in flight at once
    requests: int
    errors: int
    error_samples: list[str] = Field(default_factory=list)
    wall_s: float
    inputs_per_s: float
    latency_p50_ms: float | None
    latency_p95_ms: float | None


class EmbeddingStats(BaseModel):
    model: str
    levels: list[EmbeddingLevel]
    batch32_over_batch1: float | None  # inputs/s with 32-input requests over 1-input requests, same concurrency
    concurrent_over_sequential: float | None  # 1-input requests: concurrency N over one at a time (micro-batching)
    note: str

"""The embeddings phase's results (functions/offline/bench/phases/embeddings_phase.py): what bench.json holds for it."""

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


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def embeddings_lines(stats: EmbeddingStats) -> list[str]:
    """The phase's section of bench.md."""
    lines = [
        "",
        "## Embeddings throughput",
        "",
        f"`{stats.model}`. {stats.note}",
        "",
        "| level | requests | errors | inputs/s | latency p50 ms | latency p95 ms |",
        "|---|---|---|---|---|---|",
    ]
    for level in stats.levels:
        lines.append(
            f"| {level.label} | {level.requests} | {level.errors} | {_num(level.inputs_per_s)} | "
            f"{_num(level.latency_p50_ms)} | {_num(level.latency_p95_ms)} |"
        )
    lines += [
        "",
        f"- batch 32 over batch 1 (inputs/s, same concurrency): {_num(stats.batch32_over_batch1, 2)}x",
        f"- batch 1, concurrent over one at a time (micro-batching): {_num(stats.concurrent_over_sequential, 2)}x",
    ]
    samples = [sample for level in stats.levels for sample in level.error_samples]
    lines += [f"- error sample: `{sample}`" for sample in samples[:5]]
    return lines

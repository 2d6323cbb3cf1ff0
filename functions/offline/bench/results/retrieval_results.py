"""The retrieval phase's results (functions/offline/bench/phases/retrieval_phase.py): what bench.json holds for it."""

from __future__ import annotations

from pydantic import BaseModel


class LatencyStats(BaseModel):
    label: str
    runs: int
    p50_ms: float | None
    p95_ms: float | None


class IngestionStats(BaseModel):
    files: int
    pages: int
    chars: int
    wall_s: float  # first upload to every file `completed`
    pages_per_s: float
    failed: int
    source: str | None = None  # what the documents were


class RetrievalStats(BaseModel):
    ingestion: IngestionStats | None = None  # through the gateway: upload, extract, chunk, embed, index
    gateway: list[LatencyStats]  # the search endpoint, and chat's retrieval step as its report times it
    chunks: int  # the in-process index the engine latencies below were measured on
    maintenance_s: float | None  # the maintenance pass after ingesting that store (compaction, BM25 index update)
    engine: list[LatencyStats]  # vector search, BM25, the whole hybrid step (embedding excluded)
    note: str


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def retrieval_lines(stats: RetrievalStats) -> list[str]:
    """The phase's section of bench.md."""
    lines = ["", "## Retrieval (files, vector stores, hybrid search)", "", stats.note, ""]
    if stats.ingestion is not None:
        i = stats.ingestion
        lines += [
            f"- ingestion: {i.pages} PDF pages in {i.files} files ({i.chars} characters"
            + (f"; {i.source}" if i.source else "")
            + f") in {i.wall_s:.1f} s: **{i.pages_per_s:.2f} pages/s** ({i.failed} failed)",
        ]
    lines += [
        f"- maintenance pass over {stats.chunks} chunks (compaction, BM25 index) in {_num(stats.maintenance_s, 2)} s",
        "",
        "| what | runs | p50 ms | p95 ms |",
        "|---|---|---|---|",
    ]
    for row in [*stats.gateway, *stats.engine]:
        lines.append(f"| {row.label} | {row.runs} | {_num(row.p50_ms, 2)} | {_num(row.p95_ms, 2)} |")
    return lines

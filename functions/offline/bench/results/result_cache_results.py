"""The result-cache phase's results (bench.json `result_cache`) and its markdown section."""

from __future__ import annotations

from pydantic import BaseModel


class CacheSide(BaseModel):
    """One way of asking (whole response or stream), misses against hits, in milliseconds."""

    mode: str  # "whole" (end-to-end) or "stream" (time to first content)
    miss_p50_ms: float | None
    hit_p50_ms: float | None
    hit_over_miss: float | None  # the hit's latency as a share of the miss's (p50 over p50)
    miss_ms: list[float]
    hit_ms: list[float]


class ResultCacheStats(BaseModel):
    model: str
    max_tokens: int
    pairs: int
    not_hits: int  # second requests the gateway did not answer from its cache (header other than "hit")
    sides: list[CacheSide]
    errors: list[str]


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def result_cache_lines(result: ResultCacheStats) -> list[str]:
    """The markdown section of bench.md."""
    lines = [
        "",
        "## Result cache: hit vs miss",
        "",
        f"{result.pairs} pairs per mode, one request at a time, model {result.model}, max_tokens {result.max_tokens},"
        f" temperature 0: a fresh request (a miss the worker answers), then the same again (a hit from the cache)."
        f" Second requests that were not hits: {result.not_hits}.",
        "",
        "| measured | miss p50 ms | hit p50 ms | hit / miss |",
        "| --- | --- | --- | --- |",
    ]
    names = {"whole": "whole response", "stream": "stream, time to first content"}
    for side in result.sides:
        cells = [names[side.mode], _fmt(side.miss_p50_ms), _fmt(side.hit_p50_ms), _fmt(side.hit_over_miss, 3)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [f"- error: `{e}`" for e in result.errors]
    return lines

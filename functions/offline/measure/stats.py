"""Pure statistics: percentiles, per-request records and their aggregation into a level's numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

MAX_ERROR_SAMPLES = 5


class LevelStats(BaseModel):
    """One batch of streaming requests at a fixed concurrency, aggregated."""

    label: str
    concurrency: int
    requests: int
    errors: int
    error_samples: list[str] = Field(default_factory=list)
    wall_s: float
    output_tokens: int
    output_tok_s: float
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    itl_p50_ms: float | None
    itl_p95_ms: float | None
    per_stream_tok_s_p50: float | None


@dataclass
class RequestResult:
    """What one streaming request measured (times in seconds, from just before the request was sent)."""

    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    total_s: float | None = None
    output_tokens: int = 0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    content_chunks: int = 0
    finish_reason: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation between ranks (numpy's default); None when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    data = sorted(v for v in values if not math.isnan(v))
    if not data:
        return None
    rank = q / 100 * (len(data) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (rank - low)


def median(values: Sequence[float]) -> float | None:
    return percentile(values, 50)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is zero."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def to_ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def tokens_per_second(total_tokens: int, wall_s: float) -> float:
    """Aggregate throughput: completion tokens over the wall time of the whole batch."""
    return total_tokens / wall_s if wall_s > 0 else 0.0


def stream_decode_rate(result: RequestResult) -> float | None:
    """One stream's own decode speed: tokens after the first over the time after the first token."""
    if result.ttft_s is None or result.total_s is None or result.output_tokens < 2:
        return None
    decode_s = result.total_s - result.ttft_s
    return (result.output_tokens - 1) / decode_s if decode_s > 0 else None


def aggregate_level(label: str, concurrency: int, results: Sequence[RequestResult], wall_s: float) -> LevelStats:
    """Fold a batch's per-request records into TTFT/ITL percentiles, aggregate tok/s and the error count."""
    ok = [r for r in results if r.ok]
    errors = [r.error for r in results if r.error is not None]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    itls = [gap for r in ok for gap in r.itl_s]
    rates = [rate for r in ok if (rate := stream_decode_rate(r)) is not None]
    total_tokens = sum(r.output_tokens for r in ok)
    return LevelStats(
        label=label,
        concurrency=concurrency,
        requests=len(results),
        errors=len(errors),
        error_samples=list(dict.fromkeys(errors))[:MAX_ERROR_SAMPLES],
        wall_s=round(wall_s, 4),
        output_tokens=total_tokens,
        output_tok_s=tokens_per_second(total_tokens, wall_s),
        ttft_p50_ms=to_ms(percentile(ttfts, 50)),
        ttft_p95_ms=to_ms(percentile(ttfts, 95)),
        itl_p50_ms=to_ms(percentile(itls, 50)),
        itl_p95_ms=to_ms(percentile(itls, 95)),
        per_stream_tok_s_p50=median(rates),
    )

"""The guidellm check's record: guidellm's own figures for a run of its default request against the gateway."""

from __future__ import annotations

from pydantic import BaseModel


class GuidellmStats(BaseModel):
    """guidellm's own figures for the run (its JSON report), medians unless named."""

    model: str
    streams: int
    prompt_tokens: int
    output_tokens: int
    successful: int
    errored: int
    incomplete: int
    output_tokens_per_request: float | None  # equals `output_tokens` when ignore_eos is honoured
    ttft_ms_p50: float | None
    ttft_ms_p95: float | None
    itl_ms_p50: float | None
    output_tokens_per_s: float | None  # over the run, all streams together
    first_error: str | None = None


def guidellm_lines(stats: GuidellmStats) -> list[str]:
    """bench.md's section: guidellm's own figures, and whether every answer had the length it asked for."""
    whole = stats.output_tokens_per_request == stats.output_tokens and stats.errored == 0 and stats.incomplete == 0

    def fmt(value: float | None, digits: int = 0) -> str:
        return "—" if value is None else f"{value:,.{digits}f}"

    lines = ["", "## guidellm, with its defaults", ""]
    lines += [
        f"guidellm's own request (streamed, `ignore_eos: true`, `stream_options` with continuous usage) and its "
        f"synthetic prose, {stats.prompt_tokens} prompt / {stats.output_tokens} output tokens, {stats.streams} streams "
        f"against `{stats.model}` through the gateway; figures from its JSON report.",
        "",
        "| requests ok / errored / incomplete | output tokens per answer | TTFT p50 / p95 ms | ITL p50 ms "
        "| output tok/s |",
        "|---|---|---|---|---|",
        f"| {stats.successful} / {stats.errored} / {stats.incomplete} | {fmt(stats.output_tokens_per_request)} | "
        f"{fmt(stats.ttft_ms_p50)} / {fmt(stats.ttft_ms_p95)} | {fmt(stats.itl_ms_p50, 1)} | "
        f"{fmt(stats.output_tokens_per_s, 1)} |",
        "",
        "Every request answered with the length guidellm asked for."
        if whole
        else f"Not every request completed as asked (first error: {stats.first_error or 'none reported'}).",
    ]
    return lines

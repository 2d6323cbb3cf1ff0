"""The continuation phase's results (bench.json `continuation`): per-run records, their summary, the markdown section
and the pass/fail checks."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, Field

from functions.offline.measure import stats

GAP_OVER_PLAIN_MAX = 2.0  # the continuing leg is one ordinary TTFT (a longer, uncached prompt) plus the detection


class ContinuationRun(BaseModel):
    """One stream whose serving replica was killed with SIGKILL after `chunks_before_kill` content chunks."""

    run: int
    outcome: str  # the gateway's counter: continued, fallback, failed; or "not killed" (ended first), "error"
    chunks_before_kill: int
    plain_ttft_ms: float | None  # the same prompt, same client, uninterrupted (just before)
    gap_ms: float | None  # client: last content chunk of the first leg -> first content chunk of the continuing leg
    server_ttft_ms: float | None  # the gateway's fleetchat_gateway_continuation_ttft_seconds for this run
    done_events: int  # `data: [DONE]` lines the client got (one is right)
    error_event: bool  # an SSE `error` event reached the client
    ids: int  # distinct chunk ids (one is right)
    whole: bool  # one id, one [DONE] last, no error event, finished, the second leg goes on (no restart), usage sane
    matches_reference: bool | None  # identical to the uninterrupted greedy answer (None: no reference)
    completion_tokens: int | None  # usage of the stream (both legs)
    restart_s: float | None = None  # the killed worker's reload until /health, before the next run (not overhead)
    error: str | None = None


class ContinuationStats(BaseModel):
    """Two real workers of one pool behind a gateway of the phase's own; each run kills the serving one mid-stream."""

    model: str
    max_tokens: int
    kill_after_chunks: int
    runs: list[ContinuationRun]
    outcomes: dict[str, int]  # by outcome, from the gateway's fleetchat_gateway_continuations_total deltas
    gap_p50_ms: float | None
    gap_p95_ms: float | None
    server_p50_ms: float | None
    server_p95_ms: float | None
    plain_ttft_p50_ms: float | None
    gap_over_plain: float | None  # p50 / p50
    server_over_plain: float | None
    whole_streams: int
    one_done_streams: int
    notes: list[str] = Field(default_factory=list)


def _values(runs: list[ContinuationRun], attribute: str) -> list[float]:
    return [v for r in runs if (v := getattr(r, attribute)) is not None]


def summarize(
    model: str, max_tokens: int, kill_after_chunks: int, runs: list[ContinuationRun], notes: list[str] | None = None
) -> ContinuationStats:
    gaps, server, plain = _values(runs, "gap_ms"), _values(runs, "server_ttft_ms"), _values(runs, "plain_ttft_ms")
    plain_p50 = stats.percentile(plain, 50)
    gap_p50, server_p50 = stats.percentile(gaps, 50), stats.percentile(server, 50)
    return ContinuationStats(
        model=model,
        max_tokens=max_tokens,
        kill_after_chunks=kill_after_chunks,
        runs=runs,
        outcomes=dict(Counter(r.outcome for r in runs)),
        gap_p50_ms=gap_p50,
        gap_p95_ms=stats.percentile(gaps, 95),
        server_p50_ms=server_p50,
        server_p95_ms=stats.percentile(server, 95),
        plain_ttft_p50_ms=plain_p50,
        gap_over_plain=stats.ratio(gap_p50, plain_p50),
        server_over_plain=stats.ratio(server_p50, plain_p50),
        whole_streams=sum(1 for r in runs if r.whole),
        one_done_streams=sum(1 for r in runs if r.done_events == 1),
        notes=notes or [],
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def continuation_lines(s: ContinuationStats) -> list[str]:
    n = len(s.runs)
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(s.outcomes.items())) or "-"
    lines = [
        "",
        "## Mid-stream continuation overhead",
        "",
        f"Pool `{s.model}` on two real workers behind a gateway of the phase's own; {n} streamed answers "
        f"(max_tokens {s.max_tokens}, greedy), each with its serving worker killed (SIGKILL) after "
        f"{s.kill_after_chunks} content chunks and restarted before the next run. The gap is what the client saw: "
        "from the last content chunk of the killed leg to the first of the continuing one; the server figure is the "
        "gateway's `fleetchat_gateway_continuation_ttft_seconds` (failure noticed to the continuing leg's first "
        "content). Both are compared with the plain TTFT of the same prompt, same client, uninterrupted.",
        "",
        "| measure | p50 ms | p95 ms | p50 / plain TTFT p50 |",
        "|---|---|---|---|",
        f"| client gap (continuation overhead) | {_ms(s.gap_p50_ms)} | {_ms(s.gap_p95_ms)} | {_x(s.gap_over_plain)} |",
        f"| gateway continuation TTFT | {_ms(s.server_p50_ms)} | {_ms(s.server_p95_ms)} | {_x(s.server_over_plain)} |",
        f"| plain TTFT (uninterrupted) | {_ms(s.plain_ttft_p50_ms)} | - | 1.00x |",
        "",
        f"- continuations by outcome: {outcomes}",
        f"- streams with one `[DONE]`: {s.one_done_streams} of {n}; whole (one id, no error event, finished, a second "
        f"leg that goes on rather than starting over, usage within max_tokens): {s.whole_streams} of {n}",
        "",
        "| run | outcome | plain TTFT ms | gap ms | gateway ms | [DONE] | whole | = plain | tokens | reload s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in s.runs:
        restart = "-" if r.restart_s is None else f"{r.restart_s:.1f}"
        lines.append(
            f"| {r.run} | {r.outcome} | {_ms(r.plain_ttft_ms)} | {_ms(r.gap_ms)} | {_ms(r.server_ttft_ms)} | "
            f"{r.done_events} | {_yes(r.whole)} | {_yes(r.matches_reference)} | {r.completion_tokens or '-'} | "
            f"{restart} |"
        )
    lines += [f"- note: {note}" for note in s.notes]
    lines += [f"- run {r.run} error: `{r.error}`" for r in s.runs if r.error]
    return lines


def continuation_checks(s: ContinuationStats | None) -> list[dict[str, object]]:
    """The phase's checks as the fields of bench's `Check` (name, value, unit, target, passed)."""
    if s is None or not s.runs:
        return []
    n, good_done = len(s.runs), s.one_done_streams
    return [
        {"name": "continuation: streams whole with one [DONE]", "value": float(min(s.whole_streams, good_done)),
         "unit": "", "target": f"== {n} (every run)", "passed": s.whole_streams == n and good_done == n},
        {"name": "continuation gap p50 / plain TTFT p50", "value": s.gap_over_plain, "unit": "x",
         "target": f"<= {GAP_OVER_PLAIN_MAX:g}x",
         "passed": None if s.gap_over_plain is None else s.gap_over_plain <= GAP_OVER_PLAIN_MAX},
    ]  # fmt: skip

"""The priority phase's results (bench.json `priority`), its markdown section and its pass/fail checks."""

from __future__ import annotations

from pydantic import BaseModel, Field


class TierLatency(BaseModel):
    """One tier's streamed requests during the saturating load: TTFT (queue wait included) against its SLO."""

    tier: str
    requests: int
    ok: int
    refused: int  # 503 capacity_exceeded (the client waited and tried again)
    other_errors: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    slo_ttft_p95_ms: float
    error_samples: list[str] = Field(default_factory=list)


class PriorityStats(BaseModel):
    """A saturating free-tier load and a trickle of enterprise requests on one pool, through a gateway of its own."""

    model: str
    capacity: float | None  # the gateway's places for the pool (from its /metrics)
    load_s: float
    free_concurrency: int
    free_tenants: int
    enterprise_interval_s: float
    enterprise: TierLatency
    free: TierLatency
    max_queue_depth: float | None
    brownout_on_after_s: float | None  # from the start of the load; None: never switched on
    brownout_off_after_s: float | None  # from the end of the load; None: not off by the end of the phase
    brownout_transitions_on: float | None
    brownout_transitions_off: float | None
    notes: list[str] = Field(default_factory=list)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def priority_lines(stats: PriorityStats) -> list[str]:
    lines = [
        "",
        "## Priority admission under a saturating free load",
        "",
        f"Pool `{stats.model}` ({stats.capacity or '?'} places in a gateway of the phase's own): "
        f"{stats.free_concurrency} free streams from {stats.free_tenants} tenants for {stats.load_s:.0f} s, retrying "
        f"1 s after a refusal, plus one enterprise request every {stats.enterprise_interval_s:g} s. TTFT includes the "
        "wait for a place.",
        "",
        "| tier | requests | ok | refused (503) | other errors | TTFT p50 ms | TTFT p95 ms | SLO p95 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for tier in (stats.enterprise, stats.free):
        lines.append(
            f"| {tier.tier} | {tier.requests} | {tier.ok} | {tier.refused} | {tier.other_errors} | "
            f"{_ms(tier.ttft_p50_ms)} | {_ms(tier.ttft_p95_ms)} | {_ms(tier.slo_ttft_p95_ms)} |"
        )
    lines += [
        "",
        f"- deepest queue seen: {stats.max_queue_depth if stats.max_queue_depth is not None else '-'}",
        f"- brownout switched on {_s(stats.brownout_on_after_s)} after the load started, and off "
        f"{_s(stats.brownout_off_after_s)} after it stopped (transitions on/off: {stats.brownout_transitions_on}/"
        f"{stats.brownout_transitions_off})",
    ]
    lines += [f"- note: {note}" for note in stats.notes]
    samples = stats.enterprise.error_samples + stats.free.error_samples
    lines += [f"- error sample: `{sample}`" for sample in samples[:5]]
    return lines


def priority_checks(stats: PriorityStats | None) -> list[dict[str, object]]:
    """The phase's checks as the fields of bench's `Check` (name, value, unit, target, passed)."""
    if stats is None:
        return []
    p95, slo = stats.enterprise.ttft_p95_ms, stats.enterprise.slo_ttft_p95_ms
    on, off = stats.brownout_on_after_s, stats.brownout_off_after_s
    return [
        {
            "name": "enterprise TTFT p95 under a saturating free load",
            "value": p95,
            "unit": " ms",
            "target": f"<= {slo:g} ms (its SLO)",
            "passed": None if p95 is None else p95 <= slo,
        },
        {"name": "brownout on under the load (s after start)", "value": on, "unit": " s", "target": "switches on",
         "passed": on is not None},
        {"name": "brownout off after the load (s after end)", "value": off, "unit": " s", "target": "switches off",
         "passed": off is not None},
    ]  # fmt: skip

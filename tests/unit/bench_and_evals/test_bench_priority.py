"""Fast tests for the benchmark's priority phase: per-tier aggregation, its checks and its report section.

The phase itself starts a gateway process in front of real workers, so the benchmark exercises it."""

from __future__ import annotations

from functions.offline.bench.phases.priority_phase import _latency
from functions.offline.bench.results.priority_results import PriorityStats, TierLatency
from functions.offline.bench.results.records import BenchResult
from functions.offline.bench.results.report import render_markdown
from functions.offline.bench.results.targets import evaluate
from functions.offline.measure.stats import RequestResult
from shared.fleet.tiers import Tier


def _stats(enterprise_p95_ms: float | None, on: float | None, off: float | None) -> PriorityStats:
    def tier(name: str, p95: float | None, slo: float) -> TierLatency:
        return TierLatency(
            tier=name,
            requests=10,
            ok=8,
            refused=2,
            other_errors=0,
            ttft_p50_ms=p95,
            ttft_p95_ms=p95,
            slo_ttft_p95_ms=slo,
        )

    return PriorityStats(
        model="mini",
        capacity=8,
        load_s=45,
        free_concurrency=24,
        free_tenants=4,
        enterprise_interval_s=2,
        enterprise=tier("enterprise", enterprise_p95_ms, 1500),
        free=tier("free", 9000, 3000),
        max_queue_depth=16,
        brownout_on_after_s=on,
        brownout_off_after_s=off,
        brownout_transitions_on=1,
        brownout_transitions_off=1 if off is not None else 0,
    )


def _result(priority: PriorityStats) -> BenchResult:
    return BenchResult(
        started_at="2025-01-01T00:00:00+00:00",
        finished_at="2025-01-01T00:01:00+00:00",
        duration_s=60.0,
        config={"model": "mini", "quick": True},
        machine={},
        target_url="http://127.0.0.1:8000",
        worker_url=None,
        started_stack=False,
        priority=priority,
    )


def test_refusals_are_counted_apart_and_ttft_comes_from_the_answered_requests() -> None:
    results = [
        RequestResult(ttft_s=0.1),
        RequestResult(ttft_s=0.3),
        RequestResult(error="HTTP 503: The model `mini` is at capacity"),
        RequestResult(error="APITimeoutError: Request timed out."),
    ]
    latency = _latency(Tier.ENTERPRISE, results)
    assert (latency.requests, latency.ok, latency.refused, latency.other_errors) == (4, 2, 1, 1)
    assert latency.ttft_p50_ms is not None and 100 <= latency.ttft_p50_ms <= 300
    assert latency.slo_ttft_p95_ms == 1500 and latency.error_samples == [r.error for r in results[2:]]


def test_checks_pass_within_the_slo_with_brownout_on_then_off() -> None:
    checks = {c.name: c for c in evaluate(_result(_stats(900, 2.0, 20.0)))}
    assert checks["enterprise TTFT p95 under a saturating free load"].passed is True
    assert checks["brownout on under the load (s after start)"].passed is True
    assert checks["brownout off after the load (s after end)"].passed is True


def test_checks_fail_past_the_slo_or_when_brownout_never_ended() -> None:
    checks = {c.name: c for c in evaluate(_result(_stats(2000, 2.0, None)))}
    assert checks["enterprise TTFT p95 under a saturating free load"].passed is False
    assert checks["brownout off after the load (s after end)"].passed is False


def test_the_report_has_a_row_per_tier_and_the_brownout_timeline() -> None:
    text = render_markdown(_result(_stats(900, 2.0, 20.0)))
    assert "## Priority admission under a saturating free load" in text
    assert "| enterprise | 10 | 8 | 2 | 0 | 900 | 900 | 1500 |" in text
    assert "switched on 2.0 s after the load started, and off 20.0 s after it stopped" in text

"""Fast tests for the benchmark's pure parts: percentiles, aggregation, /metrics parsing, planning, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from functions.offline.bench import prompts
from functions.offline.bench.config import BenchConfig, make_plan
from functions.offline.bench.prom import PrefixCounters, hit_rate, prefix_counters, sample_value, sum_counters
from functions.offline.bench.results.records import BenchResult, LevelStats, OverheadStats, PrefixStats
from functions.offline.bench.results.report import render_markdown, write_reports
from functions.offline.bench.results.targets import evaluate
from functions.offline.bench.run import scaling
from functions.offline.measure.stats import (
    RequestResult,
    aggregate_level,
    difference,
    percentile,
    ratio,
    stream_decode_rate,
    tokens_per_second,
)

VLLM_METRICS = """\
# HELP vllm:num_requests_running Requests in the running batch.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="mini"} 3.0
# HELP vllm:prefix_cache_queries Prompt tokens looked up in the prefix cache.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{model_name="mini"} 2048.0
# HELP vllm:prefix_cache_hits Prompt tokens found in the prefix cache.
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="mini"} 1536.0
# HELP vllm:time_to_first_token_seconds Time to first token.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="mini"} 4.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="mini"} 5.0
vllm:time_to_first_token_seconds_count{model_name="mini"} 5.0
vllm:time_to_first_token_seconds_sum{model_name="mini"} 0.7
# HELP vllm:request_success_total Finished requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="length",model_name="mini"} 7.0
vllm:request_success_total{finished_reason="stop",model_name="mini"} 2.0
"""


def level(concurrency: int, tok_s: float, errors: int = 0, requests: int = 4) -> LevelStats:
    return LevelStats(
        label=f"c={concurrency}",
        concurrency=concurrency,
        requests=requests,
        errors=errors,
        wall_s=10.0,
        output_tokens=int(tok_s * 10),
        output_tok_s=tok_s,
        ttft_p50_ms=120.0,
        ttft_p95_ms=300.0,
        itl_p50_ms=60.0,
        itl_p95_ms=90.0,
        per_stream_tok_s_p50=15.0,
    )


# --- percentiles and small helpers


def test_percentile_interpolates_like_numpy() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 95) == pytest.approx(3.85)  # numpy.percentile([1,2,3,4], 95)
    assert percentile(list(range(1, 101)), 95) == pytest.approx(95.05)


def test_percentile_edges() -> None:
    assert percentile([], 50) is None
    assert percentile([7.0], 95) == 7.0
    assert percentile([float("nan"), 2.0], 50) == 2.0
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_ratio_and_difference_handle_missing() -> None:
    assert ratio(8.0, 2.0) == 4.0
    assert ratio(1.0, 0.0) is None
    assert ratio(None, 2.0) is None
    assert difference(12.5, 10.0) == 2.5
    assert difference(None, 1.0) is None


# --- throughput and aggregation


def test_tokens_per_second() -> None:
    assert tokens_per_second(640, 8.0) == 80.0
    assert tokens_per_second(10, 0.0) == 0.0


def test_stream_decode_rate_excludes_the_first_token() -> None:
    result = RequestResult(ttft_s=0.5, total_s=2.5, output_tokens=21)
    assert stream_decode_rate(result) == pytest.approx(10.0)
    assert stream_decode_rate(RequestResult(ttft_s=0.5, total_s=0.5, output_tokens=1)) is None


def test_aggregate_level_counts_only_successful_tokens() -> None:
    results = [
        RequestResult(ttft_s=0.1, itl_s=[0.05, 0.07], total_s=1.1, output_tokens=64),
        RequestResult(ttft_s=0.3, itl_s=[0.06], total_s=1.3, output_tokens=64),
        RequestResult(error="HTTP 429: rate limited", output_tokens=0),
        RequestResult(error="HTTP 429: rate limited"),
    ]
    stats = aggregate_level("c=2", 2, results, wall_s=2.0)
    assert stats.requests == 4
    assert stats.errors == 2
    assert stats.error_samples == ["HTTP 429: rate limited"]  # deduplicated
    assert stats.output_tokens == 128
    assert stats.output_tok_s == pytest.approx(64.0)
    assert stats.ttft_p50_ms == pytest.approx(200.0)
    assert stats.ttft_p95_ms == pytest.approx(290.0)
    assert stats.itl_p50_ms == pytest.approx(60.0)  # pooled gaps: 50, 60, 70 ms
    assert stats.per_stream_tok_s_p50 is not None


def test_aggregate_level_of_only_failures() -> None:
    stats = aggregate_level("c=1", 1, [RequestResult(error="boom")], wall_s=1.0)
    assert stats.errors == 1
    assert stats.output_tok_s == 0.0
    assert stats.ttft_p50_ms is None
    assert stats.itl_p95_ms is None


def test_scaling_is_eight_over_one() -> None:
    assert scaling([level(1, 15.0), level(8, 75.0), level(16, 90.0)]) == pytest.approx(5.0)
    assert scaling([level(8, 75.0)]) is None
    assert scaling([level(1, 15.0), level(8, 0.0, errors=4)]) is None  # an all-failed level is not a measurement


# --- /metrics parsing


def test_sample_value_reads_vllm_counters() -> None:
    assert sample_value(VLLM_METRICS, "vllm:prefix_cache_queries") == 2048.0
    assert sample_value(VLLM_METRICS, "vllm:prefix_cache_hits_total", {"model_name": "mini"}) == 1536.0
    assert sample_value(VLLM_METRICS, "vllm:prefix_cache_hits", {"model_name": "flagship"}) is None
    assert sample_value(VLLM_METRICS, "vllm:num_requests_running") == 3.0
    assert sample_value(VLLM_METRICS, "vllm:request_success") == 9.0  # summed over label sets
    assert sample_value(VLLM_METRICS, "vllm:request_success", {"finished_reason": "stop"}) == 2.0
    assert sample_value(VLLM_METRICS, "vllm:not_there") is None


def test_prefix_counters_and_hit_rate() -> None:
    before = prefix_counters(VLLM_METRICS, "mini")
    assert before == PrefixCounters(queries=2048.0, hits=1536.0)
    after = PrefixCounters(queries=3048.0, hits=2436.0)
    assert hit_rate(before, after) == pytest.approx(0.9)
    assert hit_rate(after, after) is None
    assert prefix_counters("# nothing here\n") is None
    assert sum_counters([before, after]) == PrefixCounters(queries=5096.0, hits=3972.0)


def test_sample_value_reads_what_the_worker_registry_renders() -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily
    from prometheus_client.registry import Collector

    class Fixed(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            family = CounterMetricFamily("vllm:prefix_cache_hits", "hits", labels=["model_name"])
            family.add_metric(["mini"], 42)
            yield family

    registry = CollectorRegistry()
    registry.register(Fixed())
    text = generate_latest(registry).decode()
    assert sample_value(text, "vllm:prefix_cache_hits", {"model_name": "mini"}) == 42.0


# --- prompts and plan


def test_long_system_prompt_starts_with_the_nonce_and_is_long() -> None:
    text = prompts.long_system_prompt("abc123", approx_words=700)
    assert text.startswith("Session abc123.")
    assert 700 <= len(text.split()) < 800
    assert prompts.long_system_prompt("other", 700) != text
    first, second = prompts.prefix_messages(text, 0), prompts.prefix_messages(text, 1)
    assert first[0] == second[0] and first[1] != second[1]


def test_generation_prompts_vary() -> None:
    contents = {str(prompts.generation_messages(i, f"t{i}")[0]["content"]) for i in range(16)}
    assert len(contents) == 16


def test_quick_plan_is_smaller() -> None:
    full = make_plan(BenchConfig())
    quick = make_plan(BenchConfig(quick=True))
    assert full.level_requests == [(1, 4), (8, 24), (16, 48)]
    assert quick.level_requests == [(1, 1), (8, 8), (16, 16)]
    assert quick.max_tokens <= 32 and full.max_tokens == 64
    assert quick.overhead_rounds == 1
    assert BenchConfig().worker_url is None and BenchConfig().api_key is None


# --- report


def sample_result() -> BenchResult:
    prefix = PrefixStats(
        system_prompt_tokens=1012,
        cold_ttft_ms=2100.0,
        warm_ttft_ms=180.0,
        warm_ttft_ms_all=[170.0, 180.0, 190.0],
        warm_over_cold=180.0 / 2100.0,
        cold_cached_tokens=0,
        warm_cached_tokens=[992, 992, None],
        worker_hit_rate=0.74,
        worker_hits_delta=2976.0,
        worker_queries_delta=4021.0,
    )
    overhead = OverheadStats(
        concurrency=8,
        rounds=2,
        gateway=level(8, 72.0),
        direct=level(8, 75.0, errors=1),
        throughput_ratio=0.96,
        ttft_p50_diff_ms=14.0,
        unloaded_ttft_p50_gateway_ms=95.0,
        unloaded_ttft_p50_direct_ms=90.0,
        unloaded_ttft_p50_diff_ms=5.0,
        models_p50_gateway_ms=1.9,
        models_p50_direct_ms=0.8,
        models_p50_diff_ms=1.1,
    )
    overhead.direct.error_samples = ["HTTP 503: overloaded"]
    result = BenchResult(
        started_at="2025-01-01T00:00:00+00:00",
        finished_at="2025-01-01T00:04:00+00:00",
        duration_s=240.0,
        config={"model": "mini", "max_tokens": 64, "quick": False},
        machine={"cpu_count": 2, "usable_cpus": 2, "python": "3.12.0", "torch": "2.13.0", "transformers": None},
        target_url="http://127.0.0.1:8000",
        worker_url="http://127.0.0.1:8100",
        started_stack=True,
        notes=["the benchmark started a local stack"],
        levels=[level(1, 15.0), level(8, 75.0), level(16, 90.0)],
        scaling_8_over_1=5.0,
        prefix=prefix,
        overhead=overhead,
    )
    result.checks = evaluate(result)
    return result


def test_evaluate_marks_targets() -> None:
    checks = {c.name: c for c in sample_result().checks}
    assert checks["8-stream / 1-stream aggregate tok/s"].passed is True
    assert checks["failed requests in the load levels"].passed is True
    assert checks["prefix cache: warm / cold TTFT"].passed is True
    assert checks["gateway / direct tok/s (c=8)"].passed is True
    assert checks["gateway - direct TTFT p50 (c=8)"].passed is False
    assert checks["gateway - direct TTFT p50 (one at a time)"].passed is True


def test_evaluate_leaves_unmeasured_checks_open() -> None:
    result = sample_result()
    result.scaling_8_over_1 = None
    result.overhead = None
    checks = {c.name: c for c in evaluate(result)}
    assert checks["8-stream / 1-stream aggregate tok/s"].passed is None
    assert not any(name.startswith("gateway") for name in checks)


def test_render_markdown_has_tables_and_marks() -> None:
    md = render_markdown(sample_result())
    assert md.startswith("# fleetchat benchmark")
    assert "## Targets" in md and "## Load (streaming, include_usage)" in md
    assert "## Prefix cache" in md and "## Gateway overhead (c=8, 2 interleaved round(s))" in md
    assert "✅ pass" in md and "❌ fail" in md
    assert "| 8 | 4 | 0 | 120.0 | 300.0 | 60.0 | 90.0 | 75.0 | 15.0 | 750 | 10.00 |" in md
    assert "5.00x" in md
    assert "992, 992, —" in md
    assert "74.0 %" in md
    assert "note: the benchmark started a local stack" in md
    assert "HTTP 503: overloaded" in md
    for line in md.splitlines():
        if line.startswith("|"):
            assert line.endswith("|")


def test_write_reports_round_trips(tmp_path: Path) -> None:
    result = sample_result()
    json_path, md_path = write_reports(result, tmp_path / "out")
    assert md_path.read_text(encoding="utf-8") == render_markdown(result)
    loaded = BenchResult.model_validate(json.loads(json_path.read_text(encoding="utf-8")))
    assert loaded == result


def test_markdown_shows_the_effective_max_tokens() -> None:
    result = sample_result()
    result.config = {"model": "mini", "max_tokens": 64, "quick": True, "plan": {"max_tokens": 32}}
    assert "max_tokens 32, quick=True" in render_markdown(result)


# --- stack discovery (no processes started)


def test_unreachable_gateway_is_detected() -> None:
    import socket

    from functions.offline.bench.stack import gateway_reachable

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound but not listening: connection refused
        assert gateway_reachable(f"http://127.0.0.1:{port}", timeout_s=1.0) is False


def test_remote_gateway_is_never_started_here() -> None:
    from rich.console import Console

    from functions.offline.bench.stack import start_local_stack

    with pytest.raises(RuntimeError, match="not on loopback"):
        start_local_stack("https://api.example.com", Console(quiet=True))

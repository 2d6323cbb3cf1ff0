"""The benchmark's goodput per tier: the client-side judgement (the gateway's rule and aiperf's), aiperf's command
line and how its JSON export is read, and the report section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from functions.offline.bench.aiperf_check import command, parse_export, write_dataset
from functions.offline.bench.phases.goodput_phase import judge, mean_itl
from functions.offline.bench.results.records import BenchResult, GoodputComparison, GoodputStats
from functions.offline.bench.results.report import render_markdown
from functions.offline.measure.stats import RequestResult
from shared.fleet.tables import tables
from shared.fleet.tiers import Tier


def _request(ttft: float, gaps: list[float], tokens: int | None = None) -> RequestResult:
    total = ttft + sum(gaps) + 0.01
    return RequestResult(ttft_s=ttft, itl_s=gaps, total_s=total, output_tokens=tokens or len(gaps) + 1)


def test_judge_applies_the_tier_slo_and_counts_errors_as_missed() -> None:
    slo = tables().tiers[Tier.FREE].slo  # 3 s TTFT, 0.3 s inter-token
    results = [
        _request(1.0, [0.1] * 10),  # meets
        _request(3.5, [0.1] * 10),  # slow first token
        _request(1.0, [0.1] * 5 + [2.0] * 5),  # stalls
        RequestResult(error="HTTP 503: no worker"),
    ]
    judged = judge(Tier.FREE, "mini", 2, results)
    assert (judged.met, judged.requests, judged.errors) == (1, 4, 1)
    assert judged.goodput == pytest.approx(0.25)
    assert (judged.slo_ttft_s, judged.slo_inter_token_s) == (slo.ttft_p95_s, slo.inter_token_p95_s)
    assert judged.error_samples == ["HTTP 503: no worker"]


def test_the_mean_itl_rule_can_pass_a_stream_whose_p95_gap_fails() -> None:
    """aiperf judges the mean inter-token latency: one long stall among short gaps passes its rule, not ours."""
    stalled = _request(1.0, [0.05] * 8 + [1.0, 1.0])
    judged = judge(Tier.FREE, "mini", 1, [stalled])
    assert mean_itl(stalled) == pytest.approx((sum(stalled.itl_s) + 0.01) / 10)
    assert (judged.met, judged.met_mean_itl) == (0, 1)


def test_aiperf_gets_the_tier_slo_in_milliseconds_and_the_same_load(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path / "p.jsonl", [[{"role": "user", "content": "hello there"}]])
    assert json.loads(dataset.read_text().splitlines()[0]) == {"text": "hello there"}
    cmd = command(
        "/x/aiperf",
        url="http://127.0.0.1:8000/v1",
        api_key="k",
        model="mini",
        dataset=dataset,
        tokenizer=tmp_path,
        concurrency=4,
        requests=12,
        max_tokens=32,
        slo=tables().tiers[Tier.ENTERPRISE].slo,
        artifact_dir=tmp_path / "a",
    )
    assert cmd[:2] == ["/x/aiperf", "profile"]
    assert "--streaming" in cmd and "--use-server-token-count" in cmd
    assert cmd[cmd.index("--goodput") + 1] == "time_to_first_token:1500 inter_token_latency:250"
    assert cmd[cmd.index("--url") + 1] == "http://127.0.0.1:8000"
    assert cmd[cmd.index("--concurrency") + 1] == "4" and cmd[cmd.index("--request-count") + 1] == "12"
    assert cmd[cmd.index("--extra-inputs") + 1] == "max_tokens:32"


def test_aiperf_export_goodput_counts_its_errors_as_not_good() -> None:
    export = {
        "request_count": {"unit": "requests", "avg": 3.0},
        "error_request_count": {"unit": "requests", "avg": 1.0},
        "good_request_count": {"unit": "requests", "avg": 2.0},
        "goodput": {"unit": "requests/sec", "avg": 0.5},
        "time_to_first_token": {"unit": "ms", "avg": 900.0, "p95": 1400.0},
        "inter_token_latency": {"unit": "ms", "avg": 120.0},
    }
    parsed = parse_export(export)
    assert (parsed.requests, parsed.errors, parsed.good) == (3, 1, 2)
    assert parsed.goodput == pytest.approx(0.5)
    assert parsed.ttft_p95_ms == 1400.0 and parsed.itl_avg_ms == 120.0
    assert parse_export({}).goodput is None


def test_the_report_shows_ours_and_aiperf_side_by_side() -> None:
    ours = judge(Tier.PLUS, "flagship", 2, [_request(0.5, [0.1] * 4), _request(0.5, [0.1] * 4)])
    aiperf = parse_export(
        {"request_count": {"avg": 2}, "good_request_count": {"avg": 1}, "time_to_first_token": {"p95": 700.0}}
    )
    result = BenchResult(
        started_at="t",
        finished_at="t",
        duration_s=1,
        config={},
        machine={},
        target_url="http://x",
        worker_url=None,
        started_stack=False,
        goodput=GoodputStats(max_tokens=32, mixed=[ours], alone=[GoodputComparison(ours=ours, aiperf=aiperf)]),
    )
    text = render_markdown(result)
    assert "## Goodput per tier" in text
    assert "| plus | 2 x 2 | 100.0 % | 100.0 % | **50.0 %** |" in text

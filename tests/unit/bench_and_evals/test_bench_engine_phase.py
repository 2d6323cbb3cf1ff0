"""The engine phase's checks and report from measured numbers: issue 25's targets, and the two-workers guard."""

from __future__ import annotations

from typing import Any

from functions.offline.bench.engine.phase import checks, cores_rows, full_cache_rows


def _run(tok_s: float, p95: float) -> dict[str, Any]:
    return {"tok_s": tok_s, "itl_p50_ms": p95 / 2, "itl_p95_ms": p95, "errors": 0}


def _result(cores: dict[str, Any]) -> dict[str, Any]:
    engine = {"single_tok_s": 100.0, "aggregate_8_tok_s": 250.0, "prefix": {"warm_ttft_s": 0.1, "cold_ttft_s": 2.0}}
    return {
        "llama_cpp": engine,
        "transformers": {**engine, "aggregate_8_tok_s": 80.0},
        "peer": {"single_tok_s": 90.0},
        "rss": {"llama_cpp": {"peak_mb": 700.0}},
        "cores": cores,
    }


def test_two_workers_stalling_each_other_fail_the_guard() -> None:
    measured = {"cores": 2, "streams": 8, "max_tokens": 64, "alone": _run(300, 28), "every_core_each": _run(76, 252)}
    shared_well = checks(_result({**measured, "shared": _run(220, 38)}), 8)
    stalled = checks(_result({**measured, "shared": _run(13, 3040)}), 8)
    row = next(c for c in shared_well if c["name"].startswith("two workers"))
    assert row["passed"] is True and abs(row["value"] - 220 / 300) < 1e-9
    assert next(c for c in stalled if c["name"].startswith("two workers"))["passed"] is False
    assert [c["name"] for c in shared_well][:7] == [c["name"] for c in checks(_result({}), 8)], "issue 25's rows"


def test_the_report_shows_each_arrangement_or_why_not() -> None:
    measured = {"cores": 2, "streams": 8, "max_tokens": 64}
    lines = cores_rows({**measured, "alone": _run(300, 28), "shared": _run(220, 38), "every_core_each": _run(76, 252)})
    assert "| two, cores shared (default) | 220.0 | 19.0 / 38.0 | 0 |" in lines
    assert "| two, every core each | 76.0 | 126.0 / 252.0 | 0 |" in lines
    assert "not measured (RuntimeError: no port)" in cores_rows({"error": "RuntimeError: no port"})[-1]
    assert cores_rows({}) == []


def test_the_full_cache_single_stream_is_checked_against_the_peer_and_reported() -> None:
    full = {
        "decode_lane": {"kv_cache_usage": 0.86, "single_tok_s": 104.0, "aggregate_8_tok_s": 90.0},
        "no_decode_lane": {"kv_cache_usage": 0.85, "single_tok_s": 77.0, "aggregate_8_tok_s": 88.5},
    }
    result = _result({})
    result["llama_cpp"] = {**result["llama_cpp"], "full_cache": full}
    row = next(c for c in checks(result, 8) if c["name"].startswith("single-stream behind a full prefix cache"))
    assert row["passed"] is True and abs(row["value"] - 104.0 / 90.0) < 1e-9
    lines = full_cache_rows(full, result["llama_cpp"])
    assert "86% full of earlier conversations" in lines[1]
    assert "| fresh cache | 100.0 | 250.0 |" in lines
    assert (
        "| full cache, decode lane | 104.0 | 90.0 |" in lines
        and "| full cache, no decode lane | 77.0 | 88.5 |" in lines
    )
    assert full_cache_rows({}, {}) == []

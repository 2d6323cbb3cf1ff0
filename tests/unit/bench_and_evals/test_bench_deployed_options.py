"""The bench's table of the deployed pools' vLLM options: every option the pool table sets gets a row saying where it
was measured, from the GPU run kept in the repo, or that it was not."""

from __future__ import annotations

import json
from pathlib import Path

from functions.offline.bench.engine.deployed_options import FP8_LAYOUT, latest_gpu_run, option_rows, render_rows
from shared.fleet.tables import tables
from shared.fleet.vllm_options import DraftSpeculation, VllmOptions


def _run() -> dict:
    kept = latest_gpu_run()
    assert kept is not None, "a GPU run is committed under functions/offline/bench/engine/gpu_runs/"
    return kept[1]


def test_every_option_in_the_pool_table_gets_a_row() -> None:
    rows = option_rows(_run())
    for name, pool in tables().pools.items():
        flags = pool.deployed.vllm.flags()
        named = {f for f in flags if f.startswith("--")}
        assert named == {r.option for r in rows if r.pool == name}


def test_rows_cite_the_kept_measurements() -> None:
    run = _run()
    rows = {(r.pool, r.option): r.measured for r in option_rows(run)}
    ngram = rows[("mini", "--speculative-config")]
    speedup = run["ngram"]["sets"]["cnn-dailymail"]["speedup"]
    assert f"{speedup:.2f}x on cnn-dailymail" in ngram and "NVIDIA H200" in ngram
    fp8 = rows[("flagship", "--quantization")]
    parity = run["fp8"]["per_tensor"]
    assert fp8.startswith("quality only") and f"{parity['identical_prompts']}/{parity['prompts']}" in fp8
    assert "speed not measured" in fp8
    budget = rows[("mini", "--max-num-batched-tokens")]
    assert all(f"{r['max_batch_tokens']}: " in budget for r in run["batch_budget"])


def test_without_a_gpu_run_nothing_claims_a_measurement() -> None:
    rows = option_rows(None)
    assert rows and all(r.measured in ("not measured", "nothing to measure") for r in rows), "nor does fp8"
    lines = render_rows({"gpu_run": None, "rows": [r.model_dump() for r in rows]})
    assert any("none of them was measured" in line for line in lines)


def test_a_draft_model_is_never_reported_as_measured() -> None:
    pool = tables().pools["mini"].model_copy(deep=True)
    pool.deployed.vllm = VllmOptions(speculative=DraftSpeculation(model="HuggingFaceTB/SmolLM2-135M-Instruct"))
    (row,) = option_rows(_run(), {"mini": pool})
    assert row.value == "draft HuggingFaceTB/SmolLM2-135M-Instruct" and row.measured.startswith("not measured")


def test_the_newest_run_is_read(tmp_path: Path) -> None:
    for name, day in (("h200-2026-11-28.json", "2026-11-28"), ("a100-2026-12-01.json", "2026-12-01")):
        (tmp_path / name).write_text(json.dumps({"measured_at": day}))
    kept = latest_gpu_run(tmp_path)
    assert kept is not None and kept[0] == "a100-2026-12-01.json"
    assert latest_gpu_run(tmp_path / "empty") is None


def test_fp8_cites_this_runs_distance_from_fp32_when_the_bench_measured_it() -> None:
    layouts = {
        FP8_LAYOUT: {"positions": 1024, "top1_agreement": 0.914, "perplexity": 30.04, "reference_perplexity": 29.31}
    }
    with_gpu = {(r.pool, r.option): r.measured for r in option_rows(_run(), layouts=layouts)}
    assert "top-1 91.4%, perplexity 30.04 against 29.31" in with_gpu[("flagship", "--quantization")]
    cpu_only = {(r.pool, r.option): r.measured for r in option_rows(None, layouts=layouts)}
    assert cpu_only[("flagship", "--quantization")].startswith("quality only, SmolLM2-135M-Instruct: distance")

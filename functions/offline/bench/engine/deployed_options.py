"""Where each deployed pool's vLLM options were measured: one row per pool and option, read from the pool table and
the GPU runs kept in `functions/offline/bench/engine/gpu_runs/` (written by `cuda_phase.py` on a lent GPU, committed by
hand).

vLLM itself has never run where this project is measured (no registry on the lent GPU, and its wheels exceed what may
be carried there), so every row says what was measured instead, on which machine and model, or that nothing was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from shared.fleet.pools import ModelPool
from shared.fleet.tables import tables

GPU_RUNS = Path(__file__).parent / "gpu_runs"
LOCAL_MODEL = "SmolLM2-135M-Instruct"
FP8_LAYOUT = "fp8 weights, per-tensor (vLLM)"  # engine_quality.fp8_distances' row for vLLM's own scaling


class OptionRow(BaseModel):
    pool: str
    model: str
    option: str  # the `vllm serve` flag
    value: str
    measured: str  # where and how, or "not measured"


def latest_gpu_run(folder: Path = GPU_RUNS) -> tuple[str, dict[str, Any]] | None:
    """The newest `cuda_phase` result kept in `folder` (names end in the date) and its file name, or None."""
    runs = sorted(folder.glob("*.json"), key=lambda p: p.stem[-10:])
    return (runs[-1].name, json.loads(runs[-1].read_text())) if runs else None


def _where(run: dict[str, Any]) -> str:
    device = run["device"]
    return f"{device.get('gpu', 'CPU')}, {run['measured_at'][:10]}, {LOCAL_MODEL} in {run.get('dtype', '?')}"


def _ngram(run: dict[str, Any] | None) -> str:
    sets = (run or {}).get("ngram", {}).get("sets")
    if not sets:
        return "not measured"
    speedups = ", ".join(f"{row['speedup']:.2f}x on {name}" for name, row in sets.items())
    return f"transformers' prompt lookup (4 tokens, n-gram 4), {_where(run)}: {speedups}"  # type: ignore[arg-type]


def _fp8(run: dict[str, Any] | None, layouts: dict[str, Any]) -> str:
    here = layouts.get(FP8_LAYOUT)
    local = (
        f"distance from fp32 on this CPU, {here['positions']} positions of CNN/DailyMail: top-1 "
        f"{here['top1_agreement']:.1%}, perplexity {here['perplexity']:.2f} against {here['reference_perplexity']:.2f}"
        if here
        else ""
    )
    fp8 = (run or {}).get("fp8", {})
    if "per_tensor" not in fp8:
        return f"quality only, {LOCAL_MODEL}: {local}; speed not measured" if local else "not measured"
    parity = fp8["per_tensor"]
    text = (
        f"quality only: weights rounded through e4m3 (per-tensor scales), {_where(run)}: "  # type: ignore[arg-type]
        f"{parity['identical_prompts']}/{parity['prompts']} greedy answers unchanged"
    )
    bf16 = run.get("engine", {}).get("parity_vs_cpu")  # type: ignore[union-attr]
    if bf16:  # how far rounding to the run's dtype alone moves the same answers
        text += f" (the run's dtype against fp32 on CPU: {bf16['identical_prompts']}/{bf16['prompts']})"
    return text + (f"; {local}" if local else "") + "; speed not measured"


def _budget(run: dict[str, Any] | None, value: int) -> str:
    rows = (run or {}).get("batch_budget")
    if not isinstance(rows, list) or not rows:
        return "not measured"
    best = max(rows, key=lambda r: r["tok_s"])
    sweep = ", ".join(f"{r['max_batch_tokens']}: {r['tok_s']:.0f} tok/s" for r in rows)
    closest = min(rows, key=lambda r: abs(r["max_batch_tokens"] - value))["max_batch_tokens"]
    return (
        f"the transformers engine's batch budget, {rows[0]['streams']} prompts of ~1,100 tokens, "
        f"{_where(run)}: {sweep} (best {best['max_batch_tokens']}; nearest to this pool's: {closest})"  # type: ignore[arg-type]
    )


def option_rows(
    run: dict[str, Any] | None, pools: dict[str, ModelPool] | None = None, layouts: dict[str, Any] | None = None
) -> list[OptionRow]:
    """A row for every option a deployed pool sets (vLLM's defaults: one row saying so); `layouts` is the engine
    bench's weight-layout table of this run, whose fp8 rows measure `--quantization fp8`'s distance here."""
    pools = pools if pools is not None else {**tables().pools, **tables().guard_pools}
    rows: list[OptionRow] = []
    for name, pool in pools.items():
        options, model = pool.deployed.vllm, pool.deployed.hf_repo

        def row(option: str, value: str, measured: str, name: str = name, model: str = model) -> None:
            rows.append(OptionRow(pool=name, model=model, option=option, value=value, measured=measured))

        if options.speculative is not None:
            spec = options.speculative
            if spec.method == "ngram":
                row("--speculative-config", f"ngram, {spec.num_speculative_tokens} tokens", _ngram(run))
            else:
                row("--speculative-config", f"draft {spec.model}", "not measured: no draft model on the lent GPU")
        if options.quantization is not None:
            measured = _fp8(run, layouts or {}) if options.quantization == "fp8" else "not measured"
            row("--quantization", options.quantization, measured)
        if options.max_num_batched_tokens is not None:
            budget = options.max_num_batched_tokens
            row("--max-num-batched-tokens", str(budget), _budget(run, budget))
        if not options.flags():
            row("(none)", "vLLM's defaults", "nothing to measure")
    return rows


def deployed_options(layouts: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the engine bench records: the GPU run read (its file) and a row per pool option."""
    latest = latest_gpu_run()
    run = latest[1] if latest else None
    rows = option_rows(run, layouts=layouts)
    return {"gpu_run": latest[0] if latest else None, "rows": [r.model_dump() for r in rows]}


def render_rows(section: dict[str, Any]) -> list[str]:
    """The Markdown section the engine bench appends."""
    rows = [OptionRow(**r) for r in section.get("rows", [])]
    if not rows:
        return []
    lines = ["", "Deployed pools' vLLM options, and where each was measured (vLLM itself: nowhere yet):", ""]
    if section.get("gpu_run"):
        lines += [
            f"From the GPU run kept as functions/offline/bench/engine/gpu_runs/{section['gpu_run']} (cuda_phase.py).",
            "",
        ]
    else:
        lines += ["No GPU run is kept in functions/offline/bench/engine/gpu_runs/: none of them was measured.", ""]
    lines += ["| pool (model) | option | value | measured |", "|---|---|---|---|"]
    lines += [f"| {r.pool} ({r.model}) | `{r.option}` | {r.value} | {r.measured} |" for r in rows]
    return lines

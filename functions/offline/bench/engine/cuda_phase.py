"""Benchmark phase for a lent GPU: the transformers engine on CUDA, and the deployed pools' vLLM options measured as
closely as the lent machine allows (vLLM itself cannot be carried there: no registry, and its wheels exceed what a
call may carry).

On the device, with the pool's GGUF and the CPU engine's greedy tokens (``--write-reference`` here, first):

    python -m functions.offline.bench.engine.cuda_phase --gguf PATH --reference cpu-greedy.json --prompts-dir DIR --out
    DIR

It measures, each part on its own so that one failure loses nothing else:

- ``engine``: `TransformersEngine` (paged KV, continuous batching, prefix sharing) on the device in the dtype the
  loader picks there (bf16 on CUDA): single stream, 8 and 64 streams, warm vs cold prefix TTFT on a ~1,000-token
  system prompt, and greedy parity with the CPU engine (fp32) on the fixed parity prompts.
- ``batch_budget``: the engine's tokens-per-step budget (vLLM's ``max_num_batched_tokens``) swept with 64 requests
  that each prefill a ~1,000-token prompt: aggregate tokens/s and TTFT p50/p95 per budget.
- ``ngram``: prompt-lookup speculation (vLLM's ``ngram`` method; transformers' ``prompt_lookup_num_tokens``) against
  plain greedy decoding on public prompts (CNN/DailyMail articles with an extraction ask, MT-Bench questions): tokens/s,
  speed-up, and whether the outputs are the same.
- ``fp8``: each linear weight but the output head's rounded to float8 e4m3 and back, with one scale per tensor (what
  vLLM's dynamic ``fp8`` does to the weights) and with one per output channel: greedy agreement with the unrounded
  model. Quality only: fp8 matrix kernels for transformers come from the hub, which the lent machine cannot reach.
  (The kept 2026-11-28 run predates leaving the head out: it rounded 211 layers, the tied head included.)

Writes ``cuda.json`` (and ``cuda.md``) into ``--out``, after every part.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gzip
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from functions.offline.bench.engine import measure
from functions.offline.bench.engine.quality import fp8_round_trip, load_gguf_model, number_cell
from functions.offline.bench.prompts import long_system_prompt, prefix_messages
from functions.offline.measure.stats import ratio

RESULT_FILE = "cuda.json"
REPORT_FILE = "cuda.md"
BUDGETS = (512, 2048, 8192)
NGRAM_SETS = {"cnn-dailymail": "cnn-dailymail.jsonl.gz", "mt-bench": "mt-bench.jsonl.gz"}


def device_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    import transformers

    info["transformers"] = transformers.__version__
    return info


def new_engine(model: Any, tokenizer: Any, *, max_batch_tokens: int = 512, kv_cache_tokens: int | None = None) -> Any:
    """The engine as a worker builds it; room for 64 prompts of ~1,100 tokens on a GPU, 16,384 tokens on a CPU."""
    import torch

    from gpu_workers.transformers_engine.engine import TransformersEngine

    if kv_cache_tokens is None:
        kv_cache_tokens = 131_072 if torch.cuda.is_available() else 16_384

    return TransformersEngine(
        model,
        tokenizer,
        model_name="mini",
        kv_cache_tokens=kv_cache_tokens,
        max_batch_tokens=max_batch_tokens,
        show_progress=False,
    )


# -- the engine on the device ---------------------------------------------------------------------------------------


def engine_part(model: Any, tokenizer: Any, reference: list[list[int]] | None, quick: bool) -> dict[str, Any]:
    engine = new_engine(model, tokenizer)
    try:
        sizes = {"max_tokens": 32 if quick else 128, "parity_tokens": 16 if quick else 32}
        numbers = asyncio.run(measure.engine_numbers(engine, streams=(8, 64), **sizes))
    finally:
        engine.shutdown()
    greedy = numbers.pop("greedy")
    numbers["aggregate_8_vs_single"] = ratio(numbers["aggregate_8_tok_s"], numbers["single_tok_s"])
    numbers["aggregate_64_vs_single"] = ratio(numbers["aggregate_64_tok_s"], numbers["single_tok_s"])
    numbers["warm_vs_cold_ttft"] = ratio(numbers["prefix"]["warm_ttft_s"], numbers["prefix"]["cold_ttft_s"])
    if reference is not None:
        numbers["parity_vs_cpu"] = measure.parity(reference, greedy, tokenizer.decode)
    return numbers


# -- the batch budget -----------------------------------------------------------------------------------------------


async def _loaded_run(engine: Any, streams: int, max_tokens: int) -> dict[str, Any]:
    """`streams` requests at once, each with its own ~1,000-token system prompt (nothing shared), greedy."""

    async def one(i: int) -> measure.StreamTiming:
        ids = engine.tokenize_chat(prefix_messages(long_system_prompt(uuid.uuid4().hex), i))
        return await measure.timed_stream(engine, ids, measure.greedy_params(max_tokens))

    start = time.perf_counter()
    timings = await asyncio.gather(*(one(i) for i in range(streams)))
    wall = time.perf_counter() - start
    ttfts = sorted(t.ttft_s for t in timings)
    return {
        "streams": streams,
        "tok_s": sum(t.tokens for t in timings) / wall,
        "ttft_p50_s": statistics.median(ttfts),
        "ttft_p95_s": ttfts[min(len(ttfts) - 1, round(0.95 * (len(ttfts) - 1)))],
        "wall_s": wall,
    }


def batch_budget_part(model: Any, tokenizer: Any, quick: bool) -> list[dict[str, Any]]:
    streams, max_tokens = (8, 16) if quick else (64, 64)
    rows = []
    for budget in BUDGETS[:2] if quick else BUDGETS:
        engine = new_engine(model, tokenizer, max_batch_tokens=budget)
        try:
            asyncio.run(measure.warm_up(engine))
            rows.append({"max_batch_tokens": budget, **asyncio.run(_loaded_run(engine, streams, max_tokens))})
        finally:
            engine.shutdown()
    return rows


# -- n-gram speculation ---------------------------------------------------------------------------------------------


def public_prompts(prompts_dir: Path, per_set: int) -> dict[str, list[list[dict[str, str]]]]:
    """The first user turn of the first `per_set` rows of each public set (as the safety data keeps them)."""
    sets: dict[str, list[list[dict[str, str]]]] = {}
    for name, file in NGRAM_SETS.items():
        rows = []
        with gzip.open(prompts_dir / file, "rt", encoding="utf-8") as fh:
            for line in fh:
                first = json.loads(line)["messages"][0]
                if first.get("role") == "user" and len(first.get("content", "")) < 6_000:
                    rows.append([{"role": "user", "content": first["content"]}])
                if len(rows) == per_set:
                    break
        sets[name] = rows
    return sets


def _generate(model: Any, ids: list[int], max_new_tokens: int, **kwargs: Any) -> tuple[list[int], float]:
    import torch

    input_ids = torch.tensor([ids], device=model.device)
    _sync()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            **kwargs,
        )
    _sync()
    return out[0, len(ids) :].tolist(), time.perf_counter() - start


def ngram_part(model: Any, tokenizer: Any, prompts_dir: Path, quick: bool) -> dict[str, Any]:
    from gpu_workers.chat_template import chat_prompt_ids

    per_set, max_new = (2, 24) if quick else (8, 128)
    speculate = {"prompt_lookup_num_tokens": 4, "max_matching_ngram_size": 4}  # vLLM: 4 tokens, lookup max 4
    ids0 = chat_prompt_ids(
        tokenizer, [{"role": "user", "content": "Hi."}], add_generation_prompt=True, continue_final=False
    )
    _generate(model, ids0, 4)
    _generate(model, ids0, 4, **speculate)
    result: dict[str, Any] = {"speculation": speculate, "max_new_tokens": max_new, "sets": {}}
    for name, conversations in public_prompts(prompts_dir, per_set).items():
        plain_tokens = spec_tokens = same = 0
        plain_s = spec_s = 0.0
        for messages in conversations:
            ids = chat_prompt_ids(tokenizer, messages, add_generation_prompt=True, continue_final=False)
            plain, t_plain = _generate(model, ids, max_new)
            spec, t_spec = _generate(model, ids, max_new, **speculate)
            plain_tokens, spec_tokens = plain_tokens + len(plain), spec_tokens + len(spec)
            plain_s, spec_s = plain_s + t_plain, spec_s + t_spec
            same += plain == spec
        result["sets"][name] = {
            "prompts": len(conversations),
            "plain_tok_s": plain_tokens / plain_s,
            "ngram_tok_s": spec_tokens / spec_s,
            "speedup": (spec_tokens / spec_s) / (plain_tokens / plain_s),
            "identical_outputs": same,
        }
    return result


# -- fp8 weights ----------------------------------------------------------------------------------------------------


def fp8_part(model: Any, tokenizer: Any, quick: bool) -> dict[str, Any]:
    from gpu_workers.chat_template import chat_prompt_ids

    tokens = 16 if quick else 32
    prompts = [
        chat_prompt_ids(tokenizer, [{"role": "user", "content": p}], add_generation_prompt=True, continue_final=False)
        for p in measure.PARITY_PROMPTS
    ]
    reference = [_generate(model, ids, tokens)[0] for ids in prompts]
    result: dict[str, Any] = {}
    for scales in ("per_tensor", "per_channel"):
        rounded_model = copy.deepcopy(model)
        result["linear_layers_rounded"] = fp8_round_trip(rounded_model, per_channel=scales == "per_channel")
        candidate = [_generate(rounded_model, ids, tokens)[0] for ids in prompts]
        del rounded_model
        result[scales] = measure.parity(reference, candidate, tokenizer.decode)
    return result


# -- the run --------------------------------------------------------------------------------------------------------


def run(
    gguf: Path,
    out_dir: Path,
    *,
    reference: list[list[int]] | None,
    prompts_dir: Path,
    quick: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"measured_at": datetime.now(UTC).isoformat(timespec="seconds"), "device": device_info()}
    start = time.perf_counter()
    model, tokenizer = load_gguf_model(gguf)
    result["load_s"] = time.perf_counter() - start
    result["dtype"] = str(next(model.parameters()).dtype).removeprefix("torch.")
    parts: dict[str, Callable[[], Any]] = {
        "engine": lambda: engine_part(model, tokenizer, reference, quick),
        "batch_budget": lambda: batch_budget_part(model, tokenizer, quick),
        "ngram": lambda: ngram_part(model, tokenizer, prompts_dir, quick),
        "fp8": lambda: fp8_part(model, tokenizer, quick),
    }
    for name, part in parts.items():
        log(f"cuda phase: {name}")
        began = time.perf_counter()
        try:
            result[name] = part()
        except Exception as exc:  # one part failing is a finding, not a reason to lose the others
            result[name] = {"error": f"{type(exc).__name__}: {exc}"}
        result.setdefault("part_seconds", {})[name] = time.perf_counter() - began
        (out_dir / RESULT_FILE).write_text(json.dumps(result, indent=2))
        (out_dir / REPORT_FILE).write_text(render(result))
    return result


def write_reference(gguf: Path, path: Path, tokens: int = 32) -> None:
    """The CPU engine's greedy tokens on the parity prompts: what the device's engine is compared with."""
    model, tokenizer = load_gguf_model(gguf)
    engine = new_engine(model, tokenizer, kv_cache_tokens=8_192)
    try:
        greedy = asyncio.run(measure.greedy_tokens(engine, tokens))
    finally:
        engine.shutdown()
    path.write_text(json.dumps({"dtype": str(next(model.parameters()).dtype), "tokens": greedy}))


# -- the report -----------------------------------------------------------------------------------------------------


def render(result: dict[str, Any]) -> str:
    """A short Markdown report of whatever parts have finished."""
    dev = result["device"]
    where = f"{dev.get('gpu', 'CPU')} (torch {dev['torch']}, transformers {dev['transformers']})"
    lines = [f"# CUDA phase ({result['measured_at']}, {where}, weights {result.get('dtype', '?')})", ""]
    engine = result.get("engine", {})
    if "error" in engine:
        lines.append(f"Engine: failed: {engine['error']}")
    elif engine:
        prefix = engine["prefix"]
        lines += [
            "| transformers engine on the device | value |",
            "|---|---|",
            f"| single stream, tokens/s | {number_cell(engine['single_tok_s'])} |",
            f"| 8 streams, tokens/s (x single) | {number_cell(engine['aggregate_8_tok_s'])} "
            f"({number_cell(engine['aggregate_8_vs_single'])}x) |",
            f"| 64 streams, tokens/s (x single) | {number_cell(engine['aggregate_64_tok_s'])} "
            f"({number_cell(engine['aggregate_64_vs_single'])}x) |",
            f"| TTFT cold / warm, {prefix['prompt_tokens']}-token prompt, s | "
            f"{number_cell(prefix['cold_ttft_s'], 3)} / {number_cell(prefix['warm_ttft_s'], 3)} "
            f"({prefix['cached_tokens']} cached) |",
        ]
        parity = engine.get("parity_vs_cpu")
        if parity:
            lines.append(
                f"| greedy parity with the CPU engine (fp32) | {parity['identical_prompts']}/{parity['prompts']} "
                f"prompts identical, {parity['matching_token_share']:.0%} of tokens |"
            )
    budget = result.get("batch_budget")
    if isinstance(budget, list) and budget:
        lines += ["", "| max batch tokens | streams | tokens/s | TTFT p50 / p95 s |", "|---|---|---|---|"]
        for row in budget:
            lines.append(
                f"| {row['max_batch_tokens']} | {row['streams']} | {number_cell(row['tok_s'])} | "
                f"{number_cell(row['ttft_p50_s'], 3)} / {number_cell(row['ttft_p95_s'], 3)} |"
            )
    elif isinstance(budget, dict):
        lines += ["", f"Batch budget: failed: {budget['error']}"]
    ngram = result.get("ngram", {})
    if "sets" in ngram:
        lines += [
            "",
            "| n-gram speculation | prompts | plain tok/s | n-gram tok/s | speed-up | same output |",
            "|---|---|---|---|---|---|",
        ]
        for name, row in ngram["sets"].items():
            lines.append(
                f"| {name} | {row['prompts']} | {number_cell(row['plain_tok_s'])} | "
                f"{number_cell(row['ngram_tok_s'])} | {number_cell(row['speedup'])}x | "
                f"{row['identical_outputs']}/{row['prompts']} |"
            )
    elif "error" in ngram:
        lines += ["", f"N-gram speculation: failed: {ngram['error']}"]
    fp8 = result.get("fp8", {})
    for scales in ("per_tensor", "per_channel"):
        if scales in fp8:
            p = fp8[scales]
            lines += [
                "",
                f"fp8 weights ({fp8['linear_layers_rounded']} linear layers, e4m3, {scales} scales) vs "
                f"unrounded: {p['identical_prompts']}/{p['prompts']} prompts identical, "
                f"{p['matching_token_share']:.0%} of greedy tokens before the first difference.",
            ]
    if "error" in fp8:
        lines += ["", f"fp8 weights: failed: {fp8['error']}"]
    return "\n".join(lines) + "\n"


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument("--reference", type=Path, help="the CPU engine's greedy tokens (--write-reference)")
    parser.add_argument("--prompts-dir", type=Path, default=Path("functions/offline/safety_training/data/public"))
    parser.add_argument("--write-reference", type=Path, help="write the CPU reference here and stop")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.write_reference:
        write_reference(args.gguf, args.write_reference)
        return 0
    reference = json.loads(args.reference.read_text())["tokens"] if args.reference else None
    result = run(args.gguf, args.out, reference=reference, prompts_dir=args.prompts_dir, quick=args.quick)
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

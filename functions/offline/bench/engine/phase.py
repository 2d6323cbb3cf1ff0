"""Benchmark phase: the embedded engines side by side in one run, in-process (no HTTP): the llama.cpp peer's
single-stream decode, ours (llama.cpp batched) and today's (transformers continuous batching): single-stream tokens/s,
8-stream aggregate, warm-prefix vs cold TTFT on a ~1,000-token shared system prompt, a real worker's resident memory,
and greedy parity with the transformers engine on a fixed prompt set. Targets are issue 25's, checked as ratios.

Writes `engine.json` and `engine.md` into the output folder and returns one line for the report's notes.
Run alone: `python -m functions.offline.bench.engine.phase [--quick]`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from functions.offline.bench.engine import measure
from functions.offline.bench.engine.cores import cores_phase
from functions.offline.bench.engine.deployed_options import deployed_options, render_rows
from functions.offline.bench.engine.peer import peer_batched, peer_single_stream
from functions.offline.bench.engine.quality import layout_rows, layout_table, number_cell
from functions.offline.bench.engine.rss import worker_rss_mb
from functions.offline.bench.machine import machine_info
from functions.offline.bench.prompts import generation_messages
from gpu_workers.llama_cpp.gguf_weights import weights_for
from gpu_workers.model_loader import packaged_gguf_source
from gpu_workers.registry import EngineOptions, build_engine
from shared.fleet.tables import tables

RESULT_FILE = "engine.json"
REPORT_FILE = "engine.md"
_LANES = ("decode_lane", "no_decode_lane")
console = Console(stderr=True)


def _run_engine(
    pool: str, kind: str, *, max_tokens: int, streams: int, parity_tokens: int
) -> tuple[dict[str, Any], Any]:
    engine = build_engine(pool, EngineOptions(engine=kind), show_progress=False)  # type: ignore[arg-type]
    try:
        numbers = measure.engine_numbers(engine, max_tokens=max_tokens, streams=(streams,), parity_tokens=parity_tokens)
        return asyncio.run(numbers), engine.decode
    finally:
        engine.shutdown()


def _full_cache(pool: str, max_tokens: int, streams: int, *, decode_lane: bool) -> dict[str, Any]:
    """The llama.cpp engine behind a full prefix cache, with or without its decode lane: one stream, and `streams`."""
    engine = build_engine(pool, EngineOptions(engine="llama_cpp", decode_lane=decode_lane), show_progress=False)
    try:
        return asyncio.run(measure.full_cache_tok_s(engine, max_tokens, streams))
    finally:
        engine.shutdown()


def engine_phase(out_dir: Path, *, pool: str = "mini", quick: bool = False, streams: int = 8) -> str:
    max_tokens = 48 if quick else 128
    sizes = {"max_tokens": max_tokens, "streams": streams, "parity_tokens": 16 if quick else 32}
    gguf_source = packaged_gguf_source(tables().pools[pool].local)
    gguf = Path(gguf_source.path_or_repo) / str(gguf_source.gguf_file)
    result: dict[str, Any] = {"measured_at": datetime.now(UTC).isoformat(timespec="seconds"), "pool": pool}
    result["machine"] = machine_info()
    console.print("engine phase: llama.cpp batched engine")
    ours, decode = _run_engine(pool, "llama_cpp", **sizes)
    console.print("engine phase: llama.cpp engine behind a full prefix cache, with and without the decode lane")
    ours["full_cache"] = {
        lane: _full_cache(pool, max_tokens, streams, decode_lane=lane == "decode_lane") for lane in _LANES
    }
    console.print("engine phase: transformers engine (today's)")
    today, _ = _run_engine(pool, "transformers", **sizes)
    console.print("engine phase: llama.cpp peer")
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    from gpu_workers.chat_template import chat_prompt_ids
    from gpu_workers.llama_cpp.gguf_tokenizer import load_tokenizer

    tokenizer = load_tokenizer(gguf)
    prompt = chat_prompt_ids(tokenizer, generation_messages(0), add_generation_prompt=True, continue_final=False)
    # The peer loads what our engine loads (the pool's weight layout, gguf_weights.py), and the file as shipped.
    layout = tables().pools[pool].local.llama_weights
    served = weights_for(gguf, layout)
    peer_tok_s, peer_name = peer_single_stream(served, prompt, max_tokens, threads)
    result["peer"] = {"name": peer_name, "single_tok_s": peer_tok_s, "threads": threads, "weights": layout}
    if served != gguf:
        result["peer"]["shipped_single_tok_s"] = peer_single_stream(gguf, prompt, max_tokens, threads)[0]
    # llama.cpp's own batch of `streams` sequences (same kind of prompts, same sampling): the ceiling on these cores.
    messages = [generation_messages(i, tag=f"p{i}") for i in range(streams)]
    prompts = [chat_prompt_ids(tokenizer, m, add_generation_prompt=True, continue_final=False) for m in messages]
    result["peer"]["batched"] = peer_batched(served, prompts, max_tokens, threads)
    console.print("engine phase: weight layouts (speed and distance from the shipped model)")
    try:
        result["layouts"] = layout_table(gguf, prompt, prompts, max_tokens, threads)
    except Exception as exc:  # the reference needs transformers; a finding, not a reason to lose the rest
        result["layouts"] = {"error": f"{type(exc).__name__}: {exc}"}
    console.print("engine phase: worker resident memory")
    rss: dict[str, Any] = {}
    for kind in ("llama_cpp", "transformers"):
        try:
            rss[kind] = worker_rss_mb(pool, kind, streams=streams)
        except Exception as exc:  # a worker that cannot start is a finding, not a reason to lose the rest
            rss[kind] = {"error": f"{type(exc).__name__}: {exc}"}
    result["rss"] = rss
    console.print("engine phase: two workers on one host at once")
    try:
        result["cores"] = cores_phase(pool, streams=streams, max_tokens=64)
    except Exception as exc:
        result["cores"] = {"error": f"{type(exc).__name__}: {exc}"}
    layouts = result["layouts"] if "error" not in result["layouts"] else {}
    result["deployed_options"] = deployed_options(layouts)
    result["parity"] = measure.parity(today.pop("greedy"), ours.pop("greedy"), decode)
    result["llama_cpp"], result["transformers"] = ours, today
    result["checks"] = checks(result, streams)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / RESULT_FILE).write_text(json.dumps(result, indent=2))
    (out_dir / REPORT_FILE).write_text(render(result))
    passed = sum(c["passed"] is True for c in result["checks"])
    return f"engine phase: {passed}/{len(result['checks'])} issue-25 targets met ({out_dir / REPORT_FILE})"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def checks(result: dict[str, Any], streams: int) -> list[dict[str, Any]]:
    """Issue 25's targets: (name, value, target text, lowest allowed, highest allowed)."""
    ours, today, peer = result["llama_cpp"], result["transformers"], result["peer"]
    agg = f"aggregate_{streams}_tok_s"
    prefix = ours["prefix"]
    rows = [
        ("single-stream vs llama.cpp peer", _ratio(ours["single_tok_s"], peer["single_tok_s"]), ">= 1.0x", 1.0, None),
        ("single-stream tokens/s", ours["single_tok_s"], ">= 30", 30.0, None),
        (
            "single-stream behind a full prefix cache vs llama.cpp peer",
            _ratio(ours.get("full_cache", {}).get("decode_lane", {}).get("single_tok_s"), peer["single_tok_s"]),
            ">= 1.0x",
            1.0,
            None,
        ),
        (f"{streams}-stream aggregate vs single", _ratio(ours[agg], ours["single_tok_s"]), ">= 4x", 4.0, None),
        (f"{streams}-stream aggregate vs today's", _ratio(ours[agg], today[agg]), ">= 2x", 2.0, None),
        ("warm-prefix TTFT / cold", _ratio(prefix["warm_ttft_s"], prefix["cold_ttft_s"]), "<= 0.10", None, 0.10),
        ("worker peak RSS (MiB)", result["rss"].get("llama_cpp", {}).get("peak_mb"), "<= 1024", None, 1024.0),
    ]
    cores = result.get("cores", {})
    if "shared" in cores:  # not an issue-25 target: `fleetchat up`'s two pools must not stall each other
        shared = _ratio(cores["shared"]["tok_s"], cores["alone"]["tok_s"])
        rows.append(("two workers at once / one alone (aggregate)", shared, ">= 0.5x", 0.5, None))
    out = []
    for name, value, target, low, high in rows:
        passed = None if value is None else (low is None or value >= low) and (high is None or value <= high)
        out.append({"name": name, "value": value, "target": target, "passed": passed})
    return out


def ceiling_row(result: dict[str, Any]) -> str | None:
    """Our N-stream aggregate read against llama.cpp's own N-sequence batch on the same cores (the ceiling)."""
    batched = result["peer"].get("batched")
    if not batched:
        return None
    n, peer_agg = batched["streams"], batched["aggregate_tok_s"]
    ours = result["llama_cpp"].get(f"aggregate_{n}_tok_s")
    single = result["peer"]["single_tok_s"]
    scale = f"{peer_agg / single:.2f}x its single stream" if single else "n/a"
    share = f"{ours / peer_agg:.2f}" if ours else "n/a"
    return (
        f"Ceiling: llama.cpp's own {n}-sequence batch: {peer_agg:.1f} tokens/s aggregate ({scale}); "
        f"ours is {share} of it."
    )


def full_cache_rows(full_cache: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    """Tokens/s once earlier conversations fill the prefix cache (with the decode lane and without), beside the same
    engine's on a fresh cache (`fresh`: the llama.cpp engine's own numbers)."""
    if not full_cache:
        return []
    usage = max(run["kv_cache_usage"] for run in full_cache.values())
    lines = ["", f"With the prefix cache {usage:.0%} full of earlier conversations, tokens/s:", ""]
    keys = [k for k in next(iter(full_cache.values())) if k.endswith("_tok_s")]
    lines += ["| | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    lines.append("| fresh cache | " + " | ".join(number_cell(fresh.get(k)) for k in keys) + " |")
    for name, run in full_cache.items():
        cells = " | ".join(number_cell(run.get(k)) for k in keys)
        lines.append(f"| full cache, {name.replace('_', ' ')} | {cells} |")
    return lines


def cores_rows(cores: dict[str, Any]) -> list[str]:
    """The two-workers-at-once table (engine_cores.py)."""
    if "alone" not in cores:
        return ["", f"Two workers at once: not measured ({cores.get('error', 'skipped')})."] if cores else []
    lines = [
        "",
        f"Two workers on one host ({cores['cores']} cores), {cores['streams']} sampled streams of "
        f"{cores['max_tokens']} tokens: on one worker, then half on each of two at once.",
        "",
        "| workers | tokens/s | gap p50 / p95 ms | errors |",
        "|---|---|---|---|",
    ]
    names = {"alone": "one", "shared": "two, cores shared (default)", "every_core_each": "two, every core each"}
    for key, name in names.items():
        run = cores[key]
        gaps = f"{run['itl_p50_ms'] or 0:.1f} / {run['itl_p95_ms'] or 0:.1f}"
        lines.append(f"| {name} | {run['tok_s']:.1f} | {gaps} | {run['errors']} |")
    return lines


def render(result: dict[str, Any]) -> str:
    def f(v: Any, d: int = 2) -> str:
        return "n/a" if v is None else f"{v:.{d}f}" if isinstance(v, float) else str(v)

    lines = [f"# Engine bench ({result['measured_at']}, pool {result['pool']})", ""]
    lines += ["| check | value | target | met |", "|---|---|---|---|"]
    for c in result["checks"]:
        lines.append(f"| {c['name']} | {f(c['value'])} | {c['target']} | {f(c['passed'])} |")
    lines += ["", "| | llama.cpp engine | transformers engine |", "|---|---|---|"]
    for key in result["llama_cpp"]:
        if key == "prefix":
            for sub in ("prompt_tokens", "cold_ttft_s", "warm_ttft_s", "cached_tokens"):
                lines.append(
                    f"| {sub} | {f(result['llama_cpp']['prefix'][sub], 3)} | "
                    f"{f(result['transformers']['prefix'][sub], 3)} |"
                )
        elif key != "full_cache":
            lines.append(f"| {key} | {f(result['llama_cpp'][key])} | {f(result['transformers'][key])} |")
    for kind, rss in result["rss"].items():
        lines.append(
            f"| worker RSS now / peak MiB ({kind}) | {f(rss.get('rss_mb'), 0)} / {f(rss.get('peak_mb'), 0)} | |"
        )
    lines += full_cache_rows(result["llama_cpp"].get("full_cache", {}), result["llama_cpp"])
    peer = result["peer"]
    lines += [
        "",
        f"Peer: {peer['name']}, {peer['threads']} threads, weights {peer.get('weights', 'as_shipped')}: "
        f"{f(peer['single_tok_s'])} tokens/s single-stream.",
    ]
    if peer.get("shipped_single_tok_s"):
        shipped = peer["shipped_single_tok_s"]
        lines.append(
            f"The same peer on the GGUF as shipped: {shipped:.1f} tokens/s; ours is "
            f"{f(_ratio(result['llama_cpp']['single_tok_s'], shipped))}x of it."
        )
    ceiling = ceiling_row(result)
    if ceiling:
        lines += ["", ceiling]
    lines += layout_rows(result.get("layouts", {}), peer.get("weights", "as_shipped"))
    lines += cores_rows(result.get("cores", {}))
    lines += render_rows(result.get("deployed_options", {}))
    parity = result["parity"]
    lines += [
        "",
        f"Greedy parity vs the transformers engine: {parity['identical_prompts']}/{parity['prompts']} prompts "
        f"identical, {parity['matching_token_share']:.0%} of tokens before the first difference.",
        "",
    ]
    for row in parity["rows"]:
        if not row["identical"]:
            lines.append(
                f"- {row['prompt']!r}: differs at token {row['first_difference']}: "
                f"{row['reference']!r} vs {row['candidate']!r}"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(engine_phase(Path("bench-results"), quick="--quick" in sys.argv))

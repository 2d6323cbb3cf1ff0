"""Engine-level A/B in one process: batched decode throughput with the top-p fast path on and off.

Run: `python -m functions.offline.bench.engine.decode` (loads SmolLM2 once; both engines share the weights).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from rich.console import Console

from gpu_workers.engine import SamplingParams
from gpu_workers.model_loader import load_model_and_tokenizer
from gpu_workers.registry import model_source_for
from gpu_workers.transformers_engine.engine import TransformersEngine

console = Console()


async def _aggregate_tok_s(engine: TransformersEngine, streams: int, max_tokens: int) -> float:
    async def one(i: int) -> int:
        ids = engine.tokenize_chat([{"role": "user", "content": f"Tell me a long story about island number {i}."}])
        total = 0
        async for out in engine.generate(f"ab-{time.time_ns()}-{i}", ids, SamplingParams(max_tokens=max_tokens)):
            total = out.generated_total
        return total

    start = time.perf_counter()
    tokens = sum(await asyncio.gather(*(one(i) for i in range(streams))))
    return tokens / (time.perf_counter() - start)


def main(streams: int = 8, max_tokens: int = 48, rounds: int = 2, out: Path = Path("bench-results")) -> None:
    model, tokenizer = load_model_and_tokenizer(model_source_for("mini"))
    results: dict[str, list[float]] = {"fast_path": [], "always_sort": []}
    for _ in range(rounds):  # alternate so drift on a shared machine hits both sides
        for name, skip in (("fast_path", True), ("always_sort", False)):
            engine = TransformersEngine(model, tokenizer, model_name="mini", skip_noop_top_p=skip, show_progress=False)
            try:
                asyncio.run(_aggregate_tok_s(engine, 1, 4))  # warm-up
                results[name].append(asyncio.run(_aggregate_tok_s(engine, streams, max_tokens)))
            finally:
                engine.shutdown()
            console.print(f"{name}: {results[name][-1]:.1f} tok/s ({streams} streams)")
    best = {k: max(v) for k, v in results.items()}
    ratio = best["fast_path"] / best["always_sort"]
    console.print(f"[bold]top-p fast path speed-up at {streams} streams: {ratio:.2f}x[/]")
    out.mkdir(parents=True, exist_ok=True)
    report = {"streams": streams, "tok_s": results, "ratio": ratio}
    (out / "engine_decode.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

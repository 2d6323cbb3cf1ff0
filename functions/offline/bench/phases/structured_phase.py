"""Benchmark phase: what constrained decoding costs. The same streamed requests, free and with a `json_schema`
response format, in alternating rounds of concurrent streams; each stream's decode rate is its tokens after the
first over the time from its first to its last content, so prefill and queueing are left out. Each round runs the free
streams, then the constrained ones right after; the ratio constrained / free of that round's median rates cancels
most of a shared machine's drift between rounds. Reported as the median of the rounds' ratios (1.0: the grammar mask
costs nothing) in `structured_outputs.json` and as one line in the report's notes."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import openai
from openai import AsyncOpenAI
from rich.progress import Progress

RESULT_FILE = "structured_outputs.json"
RECIPE = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 60},
        "steps": {"type": "array", "items": {"type": "string", "maxLength": 80}, "minItems": 6, "maxItems": 6},
    },
    "required": ["title", "steps"],
    "additionalProperties": False,
}
RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {"name": "recipe", "schema": RECIPE, "strict": True},
}
MESSAGES: list[Any] = [{"role": "user", "content": "Write a pancake recipe as JSON: a title and six short steps."}]


async def _decode_rate(client: AsyncOpenAI, model: str, max_tokens: int, constrained: bool) -> float | None:
    """One stream's decode tokens per second (None: too short to time, or it failed)."""
    extra: dict[str, Any] = {"response_format": RESPONSE_FORMAT} if constrained else {}
    first = last = None
    tokens = 0
    try:
        stream = await client.chat.completions.create(
            model=model,
            messages=MESSAGES,
            max_tokens=max_tokens,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            **extra,
        )
        async for chunk in stream:
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
            if any(c.delta is not None and c.delta.content for c in chunk.choices):
                last = time.perf_counter()
                first = first or last
    except (openai.OpenAIError, httpx.HTTPError):  # e.g. a structured answer cut by max_tokens: not a rate
        return None
    if first is None or last is None or last <= first or tokens < 3:
        return None
    return (tokens - 1) / (last - first)


async def structured_phase(
    client: AsyncOpenAI, model: str, out_dir: Path, progress: Progress, *, quick: bool = False
) -> str:
    """Run the phase; returns the report's note line (never raises: a failure is the note)."""
    rounds, concurrency, max_tokens = (2, 2, 96) if quick else (4, 4, 160)
    rates: dict[str, list[float]] = {"free": [], "constrained": []}
    ratios: list[float] = []
    task = progress.add_task("structured outputs: constrained vs free decoding", total=2 * rounds)
    try:
        for _ in range(rounds):
            found: dict[str, list[float]] = {}
            for name in ("free", "constrained"):
                timed = await asyncio.gather(
                    *(_decode_rate(client, model, max_tokens, name == "constrained") for _ in range(concurrency))
                )
                found[name] = [r for r in timed if r is not None]
                rates[name] += found[name]
                progress.advance(task)
            if found["free"] and found["constrained"]:
                ratios.append(statistics.median(found["constrained"]) / statistics.median(found["free"]))
        if not ratios:
            return "structured outputs phase: no round timed both free and constrained streams"
        ratio = statistics.median(ratios)
        median = {name: statistics.median(values) for name, values in rates.items()}
        out_dir.mkdir(parents=True, exist_ok=True)
        report = {"concurrency": concurrency, "decode_tok_s": rates, "round_ratios": ratios, "ratio": ratio}
        (out_dir / RESULT_FILE).write_text(json.dumps(report, indent=2))
        return (
            f"structured outputs: constrained/free decode tok/s = {ratio:.2f} (median of {len(ratios)} rounds; "
            f"{median['constrained']:.1f} vs {median['free']:.1f} tok/s per stream, {concurrency} concurrent)"
        )
    except Exception as exc:  # a phase failure must not throw away the phases already measured
        return f"structured outputs phase failed: {type(exc).__name__}: {exc}"
    finally:
        progress.remove_task(task)

"""Engine-level measurements through the `Engine` protocol (no HTTP): one stream's decode rate, N streams' aggregate,
time to first token, and greedy token sequences for parity. The same functions time every engine."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from functions.offline.bench.prompts import generation_messages, long_system_prompt, prefix_messages
from gpu_workers.engine import Engine, SamplingParams

# Fixed prompts for greedy parity: everyday asks of a small chat model, short answers.
PARITY_PROMPTS = (
    "What is the capital of France?",
    "Name three primary colours.",
    "Write one sentence about the sea.",
    "How many days are there in a leap year?",
    "Give me a synonym for happy.",
    "What is 12 times 12?",
    "Translate 'good morning' into Spanish.",
    "Why do leaves change colour in autumn?",
)


@dataclass
class StreamTiming:
    tokens: int
    ttft_s: float
    decode_s: float  # from the first to the last token

    @property
    def decode_tok_s(self) -> float | None:
        return (self.tokens - 1) / self.decode_s if self.tokens > 1 and self.decode_s > 0 else None


async def timed_stream(engine: Engine, prompt_ids: list[int], params: SamplingParams) -> StreamTiming:
    start = time.perf_counter()
    first = last = None
    tokens = 0
    async for out in engine.generate(f"bench-{uuid.uuid4().hex}", prompt_ids, params):
        now = time.perf_counter()
        if out.generated_total and first is None:
            first = now
        last = now
        tokens = out.generated_total
    first = first or start
    return StreamTiming(tokens=tokens, ttft_s=first - start, decode_s=(last or first) - first)


async def warm_up(engine: Engine) -> None:
    """One short greedy request, so that what is timed next is not the first."""
    await timed_stream(engine, engine.tokenize_chat([{"role": "user", "content": "Hi."}]), greedy_params(2))


async def engine_numbers(
    engine: Engine, *, max_tokens: int, streams: Sequence[int], parity_tokens: int
) -> dict[str, Any]:
    """After a warm-up: one stream's decode rate, each of `streams`' aggregate, prefix TTFT, greedy parity tokens."""
    await warm_up(engine)
    numbers: dict[str, Any] = {"single_tok_s": await single_stream_tok_s(engine, max_tokens)}
    for n in streams:
        numbers[f"aggregate_{n}_tok_s"] = await aggregate_tok_s(engine, n, max_tokens)
    numbers["prefix"] = await prefix_ttft(engine)
    numbers["greedy"] = await greedy_tokens(engine, parity_tokens)
    return numbers


def greedy_params(max_tokens: int) -> SamplingParams:
    """Temperature 0: the engine's argmax, token by token."""
    return SamplingParams(max_tokens=max_tokens, temperature=0.0)


async def single_stream_tok_s(engine: Engine, max_tokens: int, rounds: int = 2) -> float | None:
    """Best of `rounds` greedy streams' decode rate (tokens after the first / time from first to last)."""
    rates = []
    for i in range(rounds):
        ids = engine.tokenize_chat(generation_messages(i))  # type: ignore[arg-type]
        timing = await timed_stream(engine, ids, greedy_params(max_tokens))
        if timing.decode_tok_s:
            rates.append(timing.decode_tok_s)
    return max(rates) if rates else None


async def full_cache_tok_s(engine: Engine, max_tokens: int, streams: int, conversations: int = 12) -> dict[str, Any]:
    """One stream's decode rate, and `streams` streams' aggregate, once earlier conversations fill the prefix cache, as
    on a server that has been up a while: `conversations` unique ~1,100-token prompts are answered first (one token
    each) and kept as entries."""
    for i in range(conversations):
        ids = engine.tokenize_chat(prefix_messages(long_system_prompt(uuid.uuid4().hex), i))  # type: ignore[arg-type]
        await timed_stream(engine, ids, greedy_params(1))
    usage = engine.stats().kv_cache_usage
    single = await single_stream_tok_s(engine, max_tokens)
    aggregate = await aggregate_tok_s(engine, streams, max_tokens)
    return {"kv_cache_usage": usage, "single_tok_s": single, f"aggregate_{streams}_tok_s": aggregate}


async def aggregate_tok_s(engine: Engine, streams: int, max_tokens: int) -> float:
    """Generated tokens per second of wall time with `streams` requests in flight at once (sampled, seeded)."""

    async def one(i: int) -> int:
        ids = engine.tokenize_chat(generation_messages(i, tag=uuid.uuid4().hex[:6]))  # type: ignore[arg-type]
        timing = await timed_stream(engine, ids, SamplingParams(max_tokens=max_tokens, temperature=0.8, seed=i))
        return timing.tokens

    start = time.perf_counter()
    tokens = sum(await asyncio.gather(*(one(i) for i in range(streams))))
    return tokens / (time.perf_counter() - start)


async def prefix_ttft(engine: Engine, runs: int = 3, system_words: int = 640) -> dict[str, Any]:
    """Median TTFT of a ~1,000-token prompt: cold (a system prompt no cache has seen) and warm (the same system prompt
    again, another question), `runs` pairs."""
    cold, warm, cached, prompt_tokens = [], [], [], 0
    params = greedy_params(1)
    for _ in range(runs):
        system = long_system_prompt(uuid.uuid4().hex, system_words)
        first = engine.tokenize_chat(prefix_messages(system, 0))  # type: ignore[arg-type]
        second = engine.tokenize_chat(prefix_messages(system, 1))  # type: ignore[arg-type]
        prompt_tokens = len(second)
        cold.append((await timed_stream(engine, first, params)).ttft_s)
        warm.append((await timed_stream(engine, second, params)).ttft_s)
        async for out in engine.generate(f"bench-{uuid.uuid4().hex}", second, params):
            cached.append(out.cached_tokens)
    return {
        "prompt_tokens": prompt_tokens,
        "cold_ttft_s": statistics.median(cold),
        "warm_ttft_s": statistics.median(warm),
        "cached_tokens": max(cached) if cached else 0,
    }


async def greedy_tokens(engine: Engine, max_tokens: int) -> list[list[int]]:
    outputs = []
    for prompt in PARITY_PROMPTS:
        ids = engine.tokenize_chat([{"role": "user", "content": prompt}])
        tokens: list[int] = []
        async for out in engine.generate(f"parity-{uuid.uuid4().hex}", ids, greedy_params(max_tokens)):
            tokens += out.new_token_ids
        outputs.append(tokens)
    return outputs


def parity(reference: list[list[int]], candidate: list[list[int]], decode: Any) -> dict[str, Any]:
    """Per prompt: identical or not, the first differing position, both texts there; overall shares."""
    rows = []
    same_tokens = total_tokens = 0
    for prompt, ref, got in zip(PARITY_PROMPTS, reference, candidate, strict=True):
        diverge = next((i for i, (a, b) in enumerate(zip(ref, got, strict=False)) if a != b), None)
        if diverge is None and len(ref) != len(got):
            diverge = min(len(ref), len(got))
        common = diverge if diverge is not None else len(ref)
        same_tokens += common
        total_tokens += max(len(ref), len(got))
        rows.append(
            {
                "prompt": prompt,
                "identical": diverge is None,
                "first_difference": diverge,
                "reference": decode(ref),
                "candidate": decode(got),
            }
        )
    return {
        "prompts": len(rows),
        "identical_prompts": sum(r["identical"] for r in rows),
        "matching_token_share": same_tokens / total_tokens if total_tokens else 1.0,
        "rows": rows,
    }

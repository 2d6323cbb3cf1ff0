"""Benchmark phase: a scripted 10-turn conversation through the gateway; how much of each turn came from cache."""

from __future__ import annotations

import secrets
import time

from openai import AsyncOpenAI
from rich.progress import Progress

from functions.offline.bench.results.records import ConversationStats, TurnStats

SCRIPT = [
    "I'm planning a week of cooking at home for two people on a budget. We like vegetables, rice, beans and eggs, "
    "we have a small oven and one big pan, and we shop once a week. Keep every answer short.",
    "What should we cook on Monday?",
    "And on Tuesday, using the leftovers?",
    "Give me a shopping list for those two days.",
    "Which of these keep well in the fridge?",
    "Suggest a cheap breakfast for the week.",
    "What could we cook on Wednesday without the oven?",
    "Is there a dish for Thursday with lentils?",
    "A quick dinner for Friday, under twenty minutes?",
    "Summarise the week's plan in three lines.",
]


async def multi_turn(
    client: AsyncOpenAI, model: str, max_tokens: int, progress: Progress, turns: int = len(SCRIPT)
) -> ConversationStats:
    """One conversation, one turn at a time: turn N's cached tokens over turn N-1's whole prompt."""
    task = progress.add_task(f"conversation: {turns} turns", total=turns)
    nonce = secrets.token_hex(4)  # a fresh conversation: nothing of it can be cached before turn 1
    conversation_id: str | None = None
    results: list[TurnStats] = []
    previous_prompt: int | None = None
    for n, text in enumerate(SCRIPT[:turns], start=1):
        content = f"[{nonce}] {text}" if n == 1 else text
        extra = {"store": True} if conversation_id is None else {"conversation_id": conversation_id}
        start = time.perf_counter()
        reply = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": content}],
            max_tokens=max_tokens,
            temperature=0,
            extra_body=extra,
        )
        elapsed_ms = (time.perf_counter() - start) * 1000
        conversation_id = reply.model_dump()["conversation"]["id"]
        usage = reply.usage
        cached = usage.prompt_tokens_details.cached_tokens if usage and usage.prompt_tokens_details else 0
        prompt = usage.prompt_tokens if usage else 0
        results.append(
            TurnStats(
                turn=n,
                prompt_tokens=prompt,
                cached_tokens=cached,
                previous_prompt_tokens=previous_prompt,
                reuse=None if not previous_prompt else cached / previous_prompt,
                latency_ms=round(elapsed_ms, 1),
            )
        )
        previous_prompt = prompt
        progress.advance(task)
    reuses = [t.reuse for t in results if t.reuse is not None]
    total_prompt = sum(t.prompt_tokens for t in results[1:])
    return ConversationStats(
        turns=results,
        min_reuse=min(reuses) if reuses else None,
        hit_rate=sum(t.cached_tokens for t in results[1:]) / total_prompt if total_prompt else None,
    )

"""Benchmark phase: one stored conversation of many turns through the gateway on the real engine, longer than its
pool's context: every turn must be answered, and each turn's prompt should come from the prefix cache except where
the gateway moved the prompt's cut (functions/chat/conversation_turns.py, shared/context_window.py)."""

from __future__ import annotations

import secrets

import openai
from openai import AsyncOpenAI
from rich.progress import Progress

from functions.offline.bench.results.long_conversation_results import LongConversationStats, LongTurn

TOPICS = [
    "rivers", "bread", "bridges", "owls", "tea", "glass", "maps", "bees", "clocks", "salt", "kites", "copper",
    "moss", "violins", "lighthouses", "rice", "tides", "paper", "wolves", "chess",
]  # fmt: skip


def question(turn: int) -> str:
    return f"Turn {turn}: tell me one short fact about {TOPICS[turn % len(TOPICS)]}."


async def long_conversation_phase(
    client: AsyncOpenAI, model: str, context_tokens: int, turns: int, max_tokens: int, progress: Progress
) -> LongConversationStats:
    task = progress.add_task(f"long conversation: {turns} turns", total=turns)
    nonce = secrets.token_hex(4)  # a fresh conversation: nothing of it is cached before turn 1
    conversation_id: str | None = None
    results: list[LongTurn] = []
    for turn in range(1, turns + 1):
        text = f"[{nonce}] {question(turn)}" if turn == 1 else question(turn)
        extra = {"store": True} if conversation_id is None else {"conversation_id": conversation_id}
        try:
            reply = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": text}], max_tokens=max_tokens, temperature=0,
                extra_body=extra,
            )  # fmt: skip
        except openai.APIError as exc:
            results.append(LongTurn(turn=turn, prompt_tokens=0, cached_tokens=0, out_of_context=0, error=str(exc)))
            progress.advance(task)
            continue
        summary = reply.model_dump().get("conversation") or {}
        conversation_id = summary.get("id", conversation_id)
        usage = reply.usage
        details = usage.prompt_tokens_details if usage else None
        results.append(
            LongTurn(
                turn=turn,
                prompt_tokens=usage.prompt_tokens if usage else 0,
                cached_tokens=(details.cached_tokens or 0) if details else 0,
                out_of_context=int(summary.get("out_of_context", 0)),
            )
        )
        progress.advance(task)
    return LongConversationStats(model=model, context_tokens=context_tokens, turns=results)

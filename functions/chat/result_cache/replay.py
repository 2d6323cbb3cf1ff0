"""A result-cache hit as its client gets it: billed as cached tokens, a completion body, or the cached answer replayed
as OpenAI chunks (a fresh id, usage when asked, one [DONE]); functions/chat/delivery.py serves it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from functions.control.request_accounting import TokenUsage
from shared.storage.result_cache import CachedAnswer
from shared.wire.sse import DONE

REPLAY_CHUNK_CHARS = 64  # content per replayed chunk: a stream that looks like one, without one event per token


def billed_usage(answer: CachedAnswer) -> TokenUsage:
    """The ledger entry of a hit: every token the answer stands for (prompt and completion) as cached input. The
    ledger's cached tokens are a part of its prompt tokens (the input meter bills prompt - cached, the cached-input
    meter cached), so the completion is folded into the prompt: input 0, cached input P + C, output 0. The admission
    settles the same P + C a miss would have used."""
    tokens = answer.prompt_tokens + answer.completion_tokens
    return TokenUsage(prompt_tokens=tokens, completion_tokens=0, cached_tokens=tokens)


def client_usage(answer: CachedAnswer) -> dict[str, Any]:
    """The usage the client sees: the answer's own counts, the whole prompt reported as cached."""
    return {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.completion_tokens,
        "total_tokens": answer.prompt_tokens + answer.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": answer.prompt_tokens},
    }


def completion_body(answer: CachedAnswer, completion_id: str, created: int) -> dict[str, Any]:
    message = {"role": "assistant", "content": answer.content}
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": answer.pool,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": answer.finish_reason}],
        "usage": client_usage(answer),
    }


def _data(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def replay_events(
    answer: CachedAnswer, completion_id: str, created: int, *, include_usage: bool, conversation: dict[str, Any] | None
) -> list[bytes]:
    """The SSE events of a replayed answer, in OpenAI's order: the role, the content in pieces, the finish reason,
    the usage chunk (only when asked), fleetchat's `conversation` chunk (for a stored conversation), [DONE]."""
    base = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": answer.pool}
    usage: dict[str, Any] = {"usage": None} if include_usage else {}

    def choice(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}

    text = answer.content
    pieces = [text[i : i + REPLAY_CHUNK_CHARS] for i in range(0, len(text), REPLAY_CHUNK_CHARS)]
    events = [_data({**base, "choices": [choice({"role": "assistant", "content": ""})], **usage})]
    events += [_data({**base, "choices": [choice({"content": piece})], **usage}) for piece in pieces]
    events.append(_data({**base, "choices": [choice({}, answer.finish_reason)], **usage}))
    if include_usage:
        events.append(_data({**base, "choices": [], "usage": client_usage(answer)}))
    if conversation is not None:
        events.append(_data({**base, "choices": [], "conversation": conversation}))
    events.append(DONE)
    return events


async def replay_stream(events: list[bytes]) -> AsyncIterator[bytes]:
    for event in events:
        yield event

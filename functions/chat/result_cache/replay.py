"""Serve a result-cache hit: bill it as cached tokens, save the conversation turn when the request belongs to one,
and answer as the client asked: a completion body, or the cached answer replayed as OpenAI chunks (a fresh id, usage
when asked, one [DONE])."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from functions.chat.conversation_turns import STORED_HEADER, ConversationTurns, Turn
from functions.chat.streams.relay import answered_by, count_turn
from functions.chat.streams.resumable import RESUMABLE_HEADER, ResumableStreams
from functions.control.request_accounting import RequestAccount, TokenUsage
from functions.safety.pipeline import SafetyPipeline
from shared.storage.ledger import Outcome
from shared.storage.result_cache import CachedAnswer
from shared.wire.schemas import ChatCompletionRequest
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


async def _replay(events: list[bytes]) -> AsyncIterator[bytes]:
    for event in events:
        yield event


async def serve_hit(
    answer: CachedAnswer,
    body: ChatCompletionRequest,
    account: RequestAccount,
    turn: Turn | None,
    request: Request,
    headers: dict[str, str],
) -> Response:
    """Close the books (completed, billed as cached), save the turn, then answer streamed or not. A stream goes
    through the resumable-stream buffer like any other (event ids, `Last-Event-ID`)."""
    state = request.app.state
    turns: ConversationTurns = state.turns
    safety: SafetyPipeline = state.safety
    account.model_version = answer.model_version
    account.served_from_cache = True  # no GPU spent: kept out of the spend metric
    await account.close(billed_usage(answer), Outcome.COMPLETED)
    conversation = None
    if turn is not None:
        stored, version = await turns.finish(turn, answer.content, answer.finish_reason, answered_by(account, safety))
        count_turn(state.metrics, turn, stored)
        conversation = turn.summary(stored, version)
        headers[STORED_HEADER] = str(stored).lower()
    completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    if not body.stream:
        completion = completion_body(answer, completion_id, created)
        if conversation is not None:
            completion["conversation"] = conversation
        return JSONResponse(completion, headers=headers)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    events = replay_events(answer, completion_id, created, include_usage=include_usage, conversation=conversation)
    resumable: ResumableStreams = state.resumable
    stream = resumable.start(
        account.caller.tenant.id,
        _replay(events),
        lambda: completion_id,
        headers,
        resumable=request.headers.get(RESUMABLE_HEADER, "").lower() == "true",
    )
    return StreamingResponse(
        stream.attach(), media_type="text/event-stream", headers={"cache-control": "no-cache", **headers}
    )

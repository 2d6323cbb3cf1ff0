"""A stand-in worker that streams a fixed script in small chunks with per-chunk usage (like vLLM's
continuous_usage_stats) and records whether each stream ran to its end or was cut off by the client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse

PROMPT_TOKENS = 10


def scripted_worker(script: str, *, chunk_chars: int = 4, delay_s: float = 0.005, numbered: bool = False) -> FastAPI:
    """Streams `script` `chunk_chars` characters (one "token") per chunk; state.streams holds per-stream records.
    `numbered`: each answer ends with " (answer N)", N the call's number, so that answers can be told apart."""
    app = FastAPI()
    app.state.calls = 0
    app.state.streams = []  # {"sent": chunks sent, "finished": reached the end}

    def split(text: str) -> list[str]:
        return [text[i : i + chunk_chars] for i in range(0, len(text), chunk_chars)]

    script_pieces = split(script)

    def usage(completion: int) -> dict:
        return {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": completion,
            "total_tokens": PROMPT_TOKENS + completion,
        }

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: dict) -> StreamingResponse | JSONResponse:
        app.state.calls += 1
        answer = f"{script} (answer {app.state.calls})" if numbered else script
        pieces = split(answer) if numbered else script_pieces
        if not body.get("stream"):
            message = {"role": "assistant", "content": answer}
            return JSONResponse(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 1,
                    "model": "mini",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": usage(len(pieces)),
                }
            )
        record = {"sent": 0, "finished": False}
        app.state.streams.append(record)

        async def events() -> AsyncIterator[bytes]:
            yield _chunk({"role": "assistant", "content": ""}, None, usage(0))
            for i, piece in enumerate(pieces, 1):
                await asyncio.sleep(delay_s)
                record["sent"] = i
                yield _chunk({"content": piece}, "stop" if i == len(pieces) else None, usage(i))
            yield _chunk(None, None, usage(len(pieces)), final=True)
            yield b"data: [DONE]\n\n"
            record["finished"] = True

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def _chunk(delta: dict | None, finish_reason: str | None, usage: dict, *, final: bool = False) -> bytes:
    choices = [] if final else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "mini", "choices": choices}
    chunk["usage"] = usage
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"

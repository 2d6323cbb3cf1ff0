"""A worker speaking vLLM's protocol for a reasoning model served with `--reasoning-parser`: the answer's thinking
comes apart from its content, as `reasoning` on the message and on the first deltas (vLLM's field since it renamed
`reasoning_content`). It records every body it got (the gateway's `reasoning_effort` reaches it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse


def reasoning_worker(reasoning: str, answer: str, *, field: str = "reasoning", chunk_chars: int = 6) -> FastAPI:
    app = FastAPI()
    app.state.bodies = []
    usage = {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}

    def chunk(delta: dict[str, object], finish: str | None = None, with_usage: bool = False) -> bytes:
        body: dict[str, object] = {
            "id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 1, "model": "mini",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }  # fmt: skip
        if with_usage:
            body["usage"] = usage
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: dict) -> StreamingResponse | JSONResponse:
        app.state.bodies.append(body)
        if not body.get("stream"):
            message = {"role": "assistant", "content": answer, field: reasoning}
            return JSONResponse(
                {
                    "id": "chatcmpl-r", "object": "chat.completion", "created": 1, "model": "mini",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage,
                }
            )  # fmt: skip

        async def events() -> AsyncIterator[bytes]:
            yield chunk({"role": "assistant", "content": ""}, with_usage=True)
            for i in range(0, len(reasoning), chunk_chars):
                yield chunk({field: reasoning[i : i + chunk_chars]}, with_usage=True)
                await asyncio.sleep(0.002)
            for i in range(0, len(answer), chunk_chars):
                yield chunk({"content": answer[i : i + chunk_chars]}, with_usage=True)
            yield chunk({}, "stop", with_usage=True)
            last = {"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 1, "model": "mini"}
            yield b"data: " + json.dumps({**last, "choices": [], "usage": usage}).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "mini", "object": "model", "owned_by": "fleetchat"}]}

    return app

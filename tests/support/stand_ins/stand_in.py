"""Stand-in workers: OpenAI-compatible chat endpoints on real loopback HTTP that need no model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse


def stand_in_worker(
    name: str, *, truncate: bool = False, status: int = 200, echo: bool = False, model: str = "mini"
) -> FastAPI:
    """A worker that answers `name` (or, with echo, the last user message) and records every body it got; `model` is
    the id it lists at `GET /v1/models`."""
    app = FastAPI()
    app.state.calls = 0
    app.state.bodies = []

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: dict) -> StreamingResponse | JSONResponse:
        app.state.calls += 1
        app.state.bodies.append(body)
        answer = f"echo: {body['messages'][-1]['content']}" if echo else name
        if status != 200:
            return JSONResponse({"error": {"message": "engine exploded", "type": "server_error"}}, status_code=status)

        async def events() -> AsyncIterator[bytes]:
            yield _chunk(answer[:3], None)
            await asyncio.sleep(0.05)
            if truncate:
                raise RuntimeError("worker died mid-stream")  # uvicorn drops the connection
            yield _chunk(answer[3:], "stop")
            yield b"data: [DONE]\n\n"

        if body.get("stream"):
            return StreamingResponse(events(), media_type="text/event-stream")
        return JSONResponse(
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 1,
                "model": "mini",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "fleetchat"}]}

    if status != 200:  # a broken worker fails every other route too (completions, the tokenizer endpoints)

        @app.api_route("/{path:path}", methods=["GET", "POST"])
        async def broken(path: str) -> JSONResponse:
            app.state.calls += 1
            return JSONResponse({"error": {"message": "engine exploded", "type": "server_error"}}, status_code=status)

    return app


def _chunk(content: str, finish_reason: str | None) -> bytes:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish_reason}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "mini", "choices": [choice]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"

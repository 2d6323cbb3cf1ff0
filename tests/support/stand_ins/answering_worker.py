"""A stand-in worker whose answer is a function of the conversation it was sent: for eval suites, whose checks need
answers that are right for one prompt and wrong for another. Speaks the OpenAI chat protocol (JSON and SSE)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse

Answerer = Callable[[list[dict]], str]


def answering_worker(answer: Answerer) -> FastAPI:
    """`answer(messages) -> text`; `app.state.bodies` holds every request body."""
    app = FastAPI()
    app.state.bodies = []

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: dict) -> StreamingResponse | JSONResponse:
        app.state.bodies.append(body)
        text = answer(body["messages"])
        usage = {"prompt_tokens": 10, "completion_tokens": max(1, len(text) // 4), "total_tokens": 10}
        if not body.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            return JSONResponse(
                {"id": "c1", "object": "chat.completion", "created": 1, "model": body.get("model", "mini"),
                 "choices": [choice], "usage": usage}
            )  # fmt: skip

        async def events() -> AsyncIterator[bytes]:
            for i in range(0, len(text), 16):
                yield _chunk({"content": text[i : i + 16]}, None)
            yield _chunk({}, "stop")
            if (body.get("stream_options") or {}).get("include_usage"):
                final = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "mini", "choices": []}
                yield b"data: " + json.dumps({**final, "usage": usage}).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    return app


def _chunk(delta: dict, finish_reason: str | None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "mini", "choices": [choice]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"

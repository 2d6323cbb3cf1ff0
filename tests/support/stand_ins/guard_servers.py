"""Stand-in remote guards on real loopback HTTP: a scripted OpenAI-compatible chat-completions worker that answers in
Llama Guard 3's output format (`safe`, or `unsafe` + a line of hazard codes) by a phrase in the last turn, and can
stall, trickle its answer or answer garbage; and a fake OpenAI `/v1/moderations` endpoint. Both record what they got."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse


def llama_guard_worker(
    verdicts: dict[str, str], *, default: str = "safe", delay_s: float = 0.0, trickle_s: float = 0.0
) -> FastAPI:
    """`verdicts`: phrase -> the exact text to answer when the last turn contains it (first match wins). `delay_s`:
    wait that long before answering; `trickle_s`: send the answer a byte at a time, `trickle_s` apart (each read is
    quick, the whole answer slow)."""
    app = FastAPI()
    app.state.bodies = []

    @app.post("/v1/chat/completions")
    async def chat(body: dict) -> Response:
        app.state.bodies.append(body)
        if delay_s:
            await asyncio.sleep(delay_s)
        last = " ".join(part["text"] for part in body["messages"][-1]["content"] if part["type"] == "text")
        answer = next((text for phrase, text in verdicts.items() if phrase in last), default)
        message = {"role": "assistant", "content": answer}
        completion = {
            "id": "chatcmpl-guard",
            "object": "chat.completion",
            "created": 1,
            "model": body.get("model", "llama-guard"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 200, "completion_tokens": 3, "total_tokens": 203},
        }
        if not trickle_s:
            return JSONResponse(completion)

        async def trickle() -> AsyncIterator[bytes]:
            for byte in json.dumps(completion).encode():
                yield bytes([byte])
                await asyncio.sleep(trickle_s)

        return StreamingResponse(trickle(), media_type="application/json")

    return app


def moderation_endpoint(flag_phrase: str, category: str = "harassment") -> FastAPI:
    """A fake OpenAI `/v1/moderations`: inputs containing `flag_phrase` come back flagged in `category` (score 0.97);
    records each body and authorization header."""
    app = FastAPI()
    app.state.bodies = []
    app.state.auth = []

    @app.post("/v1/moderations")
    async def moderations(body: dict) -> JSONResponse:
        app.state.bodies.append(body)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        results = []
        for text in inputs:
            hit = flag_phrase in text
            results.append(
                {
                    "flagged": hit,
                    "categories": {category: hit, "violence": False},
                    "category_scores": {category: 0.97 if hit else 0.01, "violence": 0.02},
                }
            )
        return JSONResponse({"id": "modr-fake", "model": body.get("model"), "results": results})

    @app.middleware("http")
    async def record_auth(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        app.state.auth.append(request.headers.get("authorization"))
        return await call_next(request)

    return app

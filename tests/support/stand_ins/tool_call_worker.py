"""A stand-in worker that answers with a script of tool calls or text, whole or streamed the way vLLM streams tool calls
(id, type and name on a call's first delta, then the arguments in fragments), and records every body it received."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse

PROMPT_TOKENS = 20


def call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_worker(script: list[dict[str, Any]]) -> FastAPI:
    """Answer i is script[i] (the last one repeats): {"tool_calls": [...]} or {"content": "..."}."""
    app = FastAPI()
    app.state.bodies = []

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: dict) -> StreamingResponse | JSONResponse:
        answer = script[min(len(app.state.bodies), len(script) - 1)]
        app.state.bodies.append(body)
        calls = answer.get("tool_calls")
        finish = "tool_calls" if calls else "stop"
        usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": 7, "total_tokens": PROMPT_TOKENS + 7}
        if not body.get("stream"):
            message = {
                "role": "assistant",
                "content": answer.get("content"),
                **({"tool_calls": calls} if calls else {}),
            }
            choice = {"index": 0, "message": message, "finish_reason": finish}
            return JSONResponse({"id": "c1", "object": "chat.completion", "created": 1, "model": body["model"],
                                 "choices": [choice], "usage": usage})  # fmt: skip

        def chunk(delta: dict[str, Any] | None, finish_reason: str | None = None) -> bytes:
            choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
            payload = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": body["model"],
                       "choices": choices, "usage": usage}  # fmt: skip
            return b"data: " + json.dumps(payload).encode() + b"\n\n"

        async def events() -> AsyncIterator[bytes]:
            yield chunk({"role": "assistant", "content": ""})
            if answer.get("content"):
                yield chunk({"content": answer["content"]})
            for i, c in enumerate(calls or []):
                head = {"index": i, "id": c["id"], "type": "function", "function": {"name": c["function"]["name"]}}
                yield chunk({"tool_calls": [head]})
                args = c["function"]["arguments"]
                for piece in (args[: len(args) // 2], args[len(args) // 2 :]):
                    yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            yield chunk({}, finish)
            yield chunk(None)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app

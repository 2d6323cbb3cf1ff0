"""A stand-in worker for tool calling: each non-streamed chat completion is answered by a script, a function of the
request body that returns the assistant message (content, or `tool_calls` as OpenAI and vLLM send them, with
finish_reason "tool_calls"). Records every body it got and the usage it reported, so tests can check what the
gateway sent and what it billed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

Script = Callable[[dict[str, Any]], dict[str, Any]]


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An assistant message calling one function."""
    call = {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def last_tool_result(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON content of the last message when it is a `role: "tool"` message."""
    last = body["messages"][-1]
    return json.loads(last["content"]) if last.get("role") == "tool" else None


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


def tool_worker(script: Script) -> FastAPI:
    app = FastAPI()
    app.state.bodies = []
    app.state.usages = []

    @app.post("/v1/chat/completions")
    async def chat(body: dict) -> JSONResponse:
        if body.get("stream"):
            return JSONResponse({"error": {"message": "this stand-in answers non-streamed requests only"}}, 400)
        app.state.bodies.append(body)
        message = script(body)
        finish_reason = "tool_calls" if message.get("tool_calls") else "stop"
        # Distinct numbers per call, so a sum over rounds is told apart from any single round's.
        prompt = 7 * len(body["messages"]) + 3
        usage = {"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5,
                 "prompt_tokens_details": {"cached_tokens": 2}}  # fmt: skip
        app.state.usages.append(usage)
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:8]}",
                "object": "chat.completion",
                "created": 1,
                "model": body.get("model", "mini"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
                "usage": usage,
            }
        )

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    return app

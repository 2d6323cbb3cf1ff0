"""A stand-in worker that answers `n` choices, choice i with script i, as vLLM shapes several choices: whole, or
streamed with each choice's chunks interleaved (4 characters, one "token", per chunk) and per-chunk usage (the prompt
once, every choice's tokens). The gateway's handling of several choices is what tests drive with it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse

PROMPT_TOKENS = 10
CHUNK_CHARS = 4


def choices_worker(scripts: list[str]) -> FastAPI:
    app = FastAPI()
    app.state.bodies = []

    def usage(completion: int) -> dict:
        return {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": completion,
            "total_tokens": PROMPT_TOKENS + completion,
        }

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: dict) -> StreamingResponse | JSONResponse:
        app.state.bodies.append(body)
        n = int(body.get("n") or 1)
        answers = [scripts[i % len(scripts)] for i in range(n)]
        pieces = [[a[j : j + CHUNK_CHARS] for j in range(0, len(a), CHUNK_CHARS)] for a in answers]
        if not body.get("stream"):
            choices = [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": a},
                    "finish_reason": "stop",
                    # One entry per 4-character "token", when asked for (the shape vLLM sends).
                    "logprobs": {
                        "content": [{"token": p, "logprob": -0.5, "bytes": list(p.encode())} for p in pieces[i]]
                    }
                    if body.get("logprobs")
                    else None,
                }
                for i, a in enumerate(answers)
            ]
            total = sum(len(p) for p in pieces)
            return JSONResponse(
                {"id": "c1", "object": "chat.completion", "created": 1, "model": "mini", "choices": choices,
                 "usage": usage(total)}
            )  # fmt: skip

        async def events() -> AsyncIterator[bytes]:
            sent = 0
            for i in range(n):
                yield _chunk(i, {"role": "assistant", "content": ""}, None, usage(0))
            for step in range(max(len(p) for p in pieces)):
                for i, choice in enumerate(pieces):
                    if step < len(choice):
                        sent += 1
                        finish = "stop" if step == len(choice) - 1 else None
                        yield _chunk(i, {"content": choice[step]}, finish, usage(sent))
            yield _chunk(None, None, None, usage(sent))
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def _chunk(index: int | None, delta: dict | None, finish_reason: str | None, usage: dict) -> bytes:
    choices = [] if index is None else [{"index": index, "delta": delta, "finish_reason": finish_reason}]
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "mini", "choices": choices}
    chunk["usage"] = usage
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"

"""A stand-in worker whose answers wait until the test opens its valve: a pool that is busy for exactly as long as the
test wants, without timing anything. Records the order requests arrived in (by their last user message) and the
most it ever ran at once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse

ANSWER = ("Busy ", "pools ", "answer ", "in ", "turn.")


class Valve:
    """Opened from the test's thread; the worker's requests wait on it in the worker's event loop."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.event: asyncio.Event | None = None
        self.opened = False

    async def wait(self) -> None:
        if self.event is None:
            self.loop, self.event = asyncio.get_running_loop(), asyncio.Event()
            if self.opened:
                self.event.set()
        await self.event.wait()

    def open(self) -> None:
        self.opened = True
        if self.loop is not None and self.event is not None:
            self.loop.call_soon_threadsafe(self.event.set)


def held_worker(name: str) -> FastAPI:
    app = FastAPI()
    app.state.valve = Valve()
    app.state.arrivals = []  # the last user message of each request, in arrival order
    app.state.running = 0
    app.state.peak = 0

    def usage(completion: int) -> dict:
        return {"prompt_tokens": 5, "completion_tokens": completion, "total_tokens": 5 + completion}

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: dict) -> StreamingResponse | JSONResponse:
        app.state.arrivals.append(body["messages"][-1]["content"])
        app.state.running += 1
        app.state.peak = max(app.state.peak, app.state.running)
        try:
            await app.state.valve.wait()
        except BaseException:
            app.state.running -= 1
            raise
        if not body.get("stream"):
            app.state.running -= 1
            message = {"role": "assistant", "content": "".join(ANSWER)}
            return JSONResponse(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 1,
                    "model": name,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": usage(len(ANSWER)),
                }
            )

        async def events() -> AsyncIterator[bytes]:
            try:
                for i, piece in enumerate(ANSWER, 1):
                    finish = "stop" if i == len(ANSWER) else None
                    yield _chunk(name, [{"index": 0, "delta": {"content": piece}, "finish_reason": finish}], usage(i))
                yield _chunk(name, [], usage(len(ANSWER)))
                yield b"data: [DONE]\n\n"
            finally:
                app.state.running -= 1

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": name, "max_model_len": 8192}

    return app


def _chunk(name: str, choices: list, usage: dict) -> bytes:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": name, "choices": choices}
    return b"data: " + json.dumps({**chunk, "usage": usage}).encode() + b"\n\n"

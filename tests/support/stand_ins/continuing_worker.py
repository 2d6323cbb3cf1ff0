"""A scripted worker *process* for failover tests: streams a fixed script one word ("token") per chunk with per-chunk
usage, honours vLLM's `continue_final_message` (continues the script after the partial answer it is sent), and can
die by SIGKILL, stall before answering, or stall mid-stream, on command.

    python -m tests.support.stand_ins.continuing_worker --port P --script TEXT [--die-after N] [--stall-after N]
        [--stall-file PATH] [--delay S] [--log PATH] [--pool NAME]

--die-after N: SIGKILL itself after sending N content chunks of a stream (a crash, not a clean close).
--stall-after N: after N content chunks, send nothing more (the connection stays open).
--stall-file PATH: while PATH exists, accept requests and never answer them (no status, no headers).
--log PATH: append every request body as a JSON line.
--pool NAME: accepted (and ignored) so `fleetchat up` can run it as a supervised worker (the test-only worker command
setting); started that way it arms parent death, as `fleetchat worker` does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response, StreamingResponse

from gpu_workers.server.parent_death import die_with_supervisor
from tests.support.processes import REPO, ProcessGroup, StartingWorker

TOKEN = re.compile(r"\S+\s*")


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def _words(messages: list[dict]) -> int:
    return sum(len(tokens(str(m.get("content") or ""))) for m in messages)


def _error(message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "BadRequestError", "code": 400}}, status_code=400)


def continuing_worker(
    script: str,
    *,
    die_after: int | None = None,
    stall_after: int | None = None,
    stall_file: Path | None = None,
    delay_s: float = 0.02,
    log: Path | None = None,
) -> FastAPI:
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: dict) -> Response:
        if log is not None:
            with log.open("a") as out:
                out.write(json.dumps(body) + "\n")
        while stall_file is not None and stall_file.exists():
            await asyncio.sleep(0.05)  # accepted, never answered (while the file exists)
        messages = body["messages"]
        rest = script
        if body.get("continue_final_message"):
            if body.get("add_generation_prompt", True):
                return _error("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
            partial = str(messages[-1].get("content") or "")
            if messages[-1].get("role") != "assistant" or not script.startswith(partial):
                return _error("the partial answer is not a prefix of this worker's script")
            rest = script[len(partial) :]
        pieces = tokens(rest)
        prompt = _words(messages)
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        if limit is not None:
            pieces = pieces[:limit]

        def usage(done: int) -> dict:
            return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}

        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(pieces)}
            return JSONResponse(
                {"id": "chatcmpl-w", "object": "chat.completion", "created": 1, "model": body["model"],
                 "choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage(len(pieces))}
            )  # fmt: skip
        ident = f"chatcmpl-{os.getpid()}-{len(messages)}"
        created = int(time.time())

        def chunk(delta: dict | None, finish: str | None, done: int) -> bytes:
            choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
            data = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": body["model"],
                    "choices": choices, "usage": usage(done)}  # fmt: skip
            return b"data: " + json.dumps(data).encode() + b"\n\n"

        async def events() -> AsyncIterator[bytes]:
            yield chunk({"role": "assistant", "content": ""}, None, 0)
            for i, piece in enumerate(pieces, 1):
                await asyncio.sleep(delay_s)
                if die_after is not None and i > die_after:
                    os.kill(os.getpid(), signal.SIGKILL)
                if stall_after is not None and i > stall_after:
                    await asyncio.Event().wait()
                yield chunk({"content": piece}, "stop" if i == len(pieces) else None, i)
            yield chunk(None, None, len(pieces))
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def start_continuing_worker(group: ProcessGroup, port: int, script: str, *options: str) -> StartingWorker:
    """Spawn this module as a process on `port` (options as on its command line); `.wait()` for its health."""
    group.logs.mkdir(parents=True, exist_ok=True)
    log_path = group.logs / f"continuing-worker-{port}.log"
    log = open(log_path, "wb")  # noqa: SIM115 - handed to the child
    args = [sys.executable, "-m", "tests.support.stand_ins.continuing_worker", "--port", str(port), "--script", script]
    proc = subprocess.Popen([*args, *options], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    group.procs.append(proc)
    return StartingWorker(f"http://127.0.0.1:{port}", proc, log_path)


def main() -> None:
    die_with_supervisor()  # a no-op unless `fleetchat up` started it
    parser = argparse.ArgumentParser()
    parser.add_argument("--pool")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--script", required=True)
    parser.add_argument("--die-after", type=int)
    parser.add_argument("--stall-after", type=int)
    parser.add_argument("--stall-file", type=Path)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--log", type=Path)
    args = parser.parse_args()
    app = continuing_worker(
        args.script,
        die_after=args.die_after,
        stall_after=args.stall_after,
        stall_file=args.stall_file,
        delay_s=args.delay,
        log=args.log,
    )
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

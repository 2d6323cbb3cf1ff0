"""A scripted OpenAI-compatible judge for tests: answers chat completions in the rubric's reply format with scores
chosen deterministically from the graded question and answer, records every request, and can be made to stall,
fail transiently or reply with given text."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from anyio import to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from functions.judging.rubric import sections_of

Scorer = Callable[[str, str], tuple[int, int, int]]


def marker_scores(question: str, answer: str) -> tuple[int, int, int]:
    """Default grading from markers in the answer: "WRONG" -> accuracy 1, "UNHELPFUL" -> helpfulness 1,
    "MESSY" -> format 1; otherwise 5 for each."""
    return (1 if "UNHELPFUL" in answer else 5, 1 if "WRONG" in answer else 5, 1 if "MESSY" in answer else 5)


def scripted_judge(
    scores: Scorer | None = None,
    *,
    reply: Callable[[str, str], str] | None = None,
    gate: threading.Event | None = None,
    fail_first: int = 0,
) -> FastAPI:
    """`scores(question, answer) -> (helpfulness, accuracy, format)`; `reply(question, answer)` replaces the whole
    reply text (garbage, prose); `gate`: each call waits until it is set (a stalled judge); `fail_first`: the first
    calls answer 503. `app.state.calls` counts calls, `app.state.bodies` and `app.state.headers` hold each request's,
    `app.state.graded` each (question, answer) read from the prompt, `app.state.entered` is set on the first call."""
    scorer = scores or marker_scores
    app = FastAPI()
    app.state.calls = 0
    app.state.bodies = []
    app.state.headers = []
    app.state.graded = []
    app.state.entered = threading.Event()

    @app.post("/v1/chat/completions")
    async def chat(body: dict, request: Request) -> JSONResponse:
        app.state.calls += 1
        app.state.bodies.append(body)
        app.state.headers.append(dict(request.headers))
        app.state.entered.set()
        if gate is not None:
            await to_thread.run_sync(gate.wait)
        if app.state.calls <= fail_first:
            return JSONResponse({"error": {"message": "overloaded", "type": "server_error"}}, status_code=503)
        prompt = body["messages"][-1]["content"]
        parts = sections_of(prompt)
        question, answer = parts.get("question", ""), parts.get("answer", "")
        app.state.graded.append((question, answer))
        if reply is not None:
            text = reply(question, answer)
        else:
            helpfulness, accuracy, fmt = scorer(question, answer)
            text = json.dumps(
                {"helpfulness": helpfulness, "accuracy": accuracy, "format": fmt, "rationale": "scripted grade"}
            )
        completion = {
            "id": "chatcmpl-judge",
            "object": "chat.completion",
            "created": 1,
            "model": body.get("model", "judge"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 300, "completion_tokens": 30, "total_tokens": 330},
        }
        return JSONResponse(completion)

    return app

"""The gateway's side of structured outputs over real HTTP, with a worker that speaks the OpenAI protocol and answers
from a script (the model is not the point here): `response_format` reaches the worker unchanged, an invalid answer
is asked for once more, and nothing invalid is returned or billed as a success."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse

from functions.chat.structured_output import STRUCTURED_OUTPUTS
from tests.integration.conftest import GatewayFactory
from tests.support.prom import labelled
from tests.support.servers import serve

POINT = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
    "required": ["x", "y"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "point", "schema": POINT, "strict": True}}
MESSAGES = [{"role": "user", "content": "A point, please."}]


def answering_worker(answers: list[str]) -> FastAPI:
    """Answers call i with answers[i] (the last one again after that); records every body it receives."""
    app = FastAPI()
    app.state.bodies = []

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: dict[str, Any]) -> JSONResponse | StreamingResponse:
        app.state.bodies.append(body)
        text = answers[min(len(app.state.bodies), len(answers)) - 1]
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if not body.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            return JSONResponse(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 1,
                    "model": body["model"],
                    "choices": [choice],
                    "usage": usage,
                }
            )

        async def events() -> AsyncIterator[bytes]:
            for delta, finish in (({"role": "assistant", "content": ""}, None), ({"content": text}, "stop")):
                chunk = {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": body["model"],
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    "usage": usage,
                }
                yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def outcome(url: str, result: str) -> float:
    return labelled(url, f"{STRUCTURED_OUTPUTS}_total", pool="mini", kind="json_schema", outcome=result)


def billed(url: str, headers: dict[str, str]) -> dict[str, int]:
    """The tenant's usage this month as the ledger holds it (written before the response is sent)."""
    totals = httpx.get(f"{url}/v1/usage", headers=headers, timeout=10).raise_for_status().json()["totals"]
    return {k: totals[k] for k in ("requests", "prompt_tokens", "completion_tokens")}


def test_response_format_reaches_the_worker_unchanged_and_a_valid_answer_passes(gateway_for: GatewayFactory) -> None:
    worker = answering_worker(['{"x": 1, "y": 2}'])
    with serve(worker) as url:
        gw = gateway_for({"mini": [url]})
        api = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
        reply = api.chat.completions.create(model="mini", messages=MESSAGES, response_format=FORMAT)  # type: ignore[arg-type]
        assert json.loads(reply.choices[0].message.content or "") == {"x": 1, "y": 2}
        assert worker.state.bodies[0]["response_format"] == FORMAT
        assert outcome(gw.url, "valid") == 1


def test_an_invalid_answer_is_retried_once_then_a_502_billed_nothing(gateway_for: GatewayFactory) -> None:
    worker = answering_worker(['{"x": 1}', '{"x": 1, "y": "two"}'])
    with serve(worker) as url:
        gw = gateway_for({"mini": [url]})
        api = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
        with pytest.raises(openai.APIStatusError) as caught:
            api.chat.completions.create(model="mini", messages=MESSAGES, response_format=FORMAT)  # type: ignore[arg-type]
        assert caught.value.status_code == 502
        assert "does not match the schema at y" in str(caught.value)
        assert len(worker.state.bodies) == 2
        assert outcome(gw.url, "failed") == 1
        assert billed(gw.url, gw.headers()) == {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}


def test_the_retry_answer_is_returned_when_it_is_valid(gateway_for: GatewayFactory) -> None:
    worker = answering_worker(["not json", '{"x": 3, "y": 4}'])
    with serve(worker) as url:
        gw = gateway_for({"mini": [url]})
        api = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
        reply = api.chat.completions.create(model="mini", messages=MESSAGES, response_format=FORMAT)  # type: ignore[arg-type]
        assert json.loads(reply.choices[0].message.content or "") == {"x": 3, "y": 4}
        assert outcome(gw.url, "retried") == 1
        # The answer returned is billed; the gateway's own retry is not (each worker answer used 10 + 5 tokens).
        assert billed(gw.url, gw.headers()) == {"requests": 1, "prompt_tokens": 10, "completion_tokens": 5}


def test_an_invalid_stream_ends_with_an_error_event(gateway_for: GatewayFactory) -> None:
    worker = answering_worker(['{"x": 1, "y": null}'])
    with serve(worker) as url:
        gw = gateway_for({"mini": [url]})
        api = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
        stream = api.chat.completions.create(
            model="mini",
            messages=MESSAGES,
            response_format=FORMAT,
            stream=True,  # type: ignore[arg-type]
        )
        finishes = []
        with pytest.raises(openai.APIError, match="does not match the schema"):
            for chunk in stream:
                finishes += [c.finish_reason for c in chunk.choices if c.finish_reason]
        assert finishes == []


def test_a_bad_schema_never_reaches_a_worker(gateway_for: GatewayFactory) -> None:
    worker = answering_worker(["{}"])
    with serve(worker) as url:
        gw = gateway_for({"mini": [url]})
        bad = {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": 5}}}
        response = httpx.post(
            f"{gw.url}/v1/chat/completions",
            headers=gw.headers(),
            json={"model": "mini", "messages": MESSAGES, "response_format": bad},
            timeout=10,
        )
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "response_format.json_schema.schema"
        assert worker.state.bodies == []

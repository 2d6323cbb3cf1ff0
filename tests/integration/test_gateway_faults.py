"""Gateway behaviour when workers misbehave, against stand-in workers on real loopback HTTP (no model needed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import openai
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse

from functions.app import create_app
from shared.api_keys import hash_api_key, new_api_key
from shared.settings import Settings
from shared.storage.sqlite import SQLiteStore
from shared.tiers import Tier
from tests.support.processes import free_port
from tests.support.servers import serve

CHUNK = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"mini",'
    b'"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
)


def stand_in_worker(name: str, *, truncate: bool = False, status: int = 200) -> FastAPI:
    app = FastAPI()
    app.state.calls = 0

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: dict) -> StreamingResponse | JSONResponse:
        app.state.calls += 1
        if status != 200:
            return JSONResponse({"error": {"message": "engine exploded", "type": "server_error"}}, status_code=status)

        async def events() -> AsyncIterator[bytes]:
            yield CHUNK
            await asyncio.sleep(0.05)
            if truncate:
                raise RuntimeError("worker died mid-stream")  # uvicorn drops the connection
            yield b"data: [DONE]\n\n"

        if body.get("stream"):
            return StreamingResponse(events(), media_type="text/event-stream")
        return JSONResponse(
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 1,
                "model": "mini",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": name}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    return app


@pytest.fixture
def gateway_for(tmp_path: Path) -> Iterator:
    """Build a gateway (real uvicorn) in front of the given worker URLs; returns (base_url, api_key)."""
    stack = []

    def build(worker_urls: dict[str, list[str]]) -> tuple[str, str]:
        store = SQLiteStore(tmp_path / "db.sqlite")
        tenant = store.create_tenant("t", Tier.PLUS)
        key = new_api_key()
        store.add_api_key(tenant.id, hash_api_key(key), "t")
        app = create_app(Settings(data_dir=tmp_path, worker_urls=worker_urls, pools=list(worker_urls)), store=store)
        ctx = serve(app)
        url = ctx.__enter__()
        stack.append(ctx)
        return url, key

    yield build
    for ctx in reversed(stack):
        ctx.__exit__(None, None, None)


def test_worker_dying_mid_stream_ends_with_an_error_event(gateway_for) -> None:
    with serve(stand_in_worker("w", truncate=True)) as worker:
        url, key = gateway_for({"mini": [worker], "flagship": [worker]})
        raw = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "mini", "messages": [{"role": "user", "content": "hi"}], "stream": True},
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
        )
        events = [e for e in raw.text.split("\n\n") if e.strip()]
        assert events[0].startswith("data: {")
        assert events[-2].startswith("event: error\ndata: ")
        assert events[-1] == "data: [DONE]"
        api = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
        stream = api.chat.completions.create(model="mini", messages=[{"role": "user", "content": "hi"}], stream=True)
        with pytest.raises(openai.APIError, match="stopped before finishing"):
            list(stream)


def test_unreachable_replica_fails_over_to_the_next(gateway_for) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with serve(stand_in_worker("alive")) as alive:
        url, key = gateway_for({"mini": [dead, alive], "flagship": [alive]})
        api = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
        for session in ("a", "b", "c", "d"):
            reply = api.chat.completions.create(
                model="mini", messages=[{"role": "user", "content": "hi"}], extra_headers={"x-session-id": session}
            )
            assert reply.choices[0].message.content == "alive"


def test_no_worker_at_all_is_503_with_retry_after(gateway_for) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    url, key = gateway_for({"mini": [dead], "flagship": [dead]})
    response = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "mini", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert response.status_code == 503
    assert 1 <= int(response.headers["retry-after"]) <= 60
    assert response.json()["error"]["code"] == "service_unavailable"
    assert httpx.get(f"{url}/healthz", timeout=10).status_code == 503


def test_worker_error_is_final_not_retried_and_maps_to_502(gateway_for) -> None:
    broken, other = stand_in_worker("broken", status=500), stand_in_worker("other")
    with serve(broken) as first, serve(other) as second:
        url, key = gateway_for({"mini": [first, second], "flagship": [second]})
        # Without a session id replicas rotate, so two requests reach both; the broken one's answer is final.
        statuses = sorted(
            httpx.post(
                f"{url}/v1/chat/completions",
                json={"model": "mini", "messages": [{"role": "user", "content": "hi"}]},
                headers={"authorization": f"Bearer {key}"},
                timeout=30,
            ).status_code
            for _ in range(2)
        )
        assert statuses == [200, 502]
        assert broken.state.calls == 1 and other.state.calls == 1, "a 5xx answer must not be replayed elsewhere"

"""The deployed configuration's wiring, on loopback: a gateway built with the worker credential (the
`fleetchat-workers` secret's variables) reaches workers that require it — chat, streamed and not, through the `openai`
SDK — and sends the Modal proxy token with every worker request; without the credential the same workers refuse it."""

from __future__ import annotations

import openai
import pytest
from fastapi import FastAPI, Request

from gpu_workers.server.app import create_worker_app
from tests.integration.conftest import GatewayFactory
from tests.support.servers import serve
from tests.unit.workers.test_worker_server import ScriptedEngine

KEY = "worker-key-for-this-test"
CREDENTIAL = {"api_key": KEY, "proxy_token_id": "wk-test", "proxy_token_secret": "ws-test"}


def keyed_worker(seen: list[dict[str, str]]) -> FastAPI:
    app = create_worker_app(ScriptedEngine("hello there"), accepted_keys=frozenset({KEY}))

    @app.middleware("http")
    async def record(request: Request, call_next):  # type: ignore[no-untyped-def]
        seen.append({k: v for k, v in request.headers.items() if k in ("authorization", "modal-key", "modal-secret")})
        return await call_next(request)

    return app


def ask(base_url: str, key: str, *, stream: bool) -> str:
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0, timeout=30)
    messages = [{"role": "user", "content": "hi"}]
    if not stream:
        answer = client.chat.completions.create(model="mini", messages=messages, max_tokens=16)  # type: ignore[arg-type]
        return answer.choices[0].message.content or ""
    chunks = client.chat.completions.create(model="mini", messages=messages, max_tokens=16, stream=True)  # type: ignore[arg-type]
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_the_gateway_presents_the_worker_key_and_the_proxy_token(gateway_for: GatewayFactory) -> None:
    seen: list[dict[str, str]] = []
    with serve(keyed_worker(seen)) as worker:
        gateway = gateway_for({"mini": [worker]}, worker=CREDENTIAL)
        for stream in (False, True):
            assert ask(gateway.url, gateway.key, stream=stream) == "hello there"
    chat_calls = [headers for headers in seen if headers]
    assert chat_calls and all(
        headers == {"authorization": f"Bearer {KEY}", "modal-key": "wk-test", "modal-secret": "ws-test"}
        for headers in chat_calls
    )


def test_without_the_credential_the_workers_refuse_the_gateway(gateway_for: GatewayFactory) -> None:
    with serve(keyed_worker([])) as worker:
        gateway = gateway_for({"mini": [worker]})
        with pytest.raises(openai.APIStatusError) as refused:
            ask(gateway.url, gateway.key, stream=False)
    # The worker's 401 is the operator's problem, never the client's key: the replica counts as failed, and with no
    # other replica the client gets a retryable 503.
    assert refused.value.status_code == 503
    assert refused.value.response.headers.get("retry-after")

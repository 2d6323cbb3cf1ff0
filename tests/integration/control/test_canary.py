"""Canary versions over real HTTP with two scripted worker sets: conversations stick to one version and every answer
records the version that gave it (header and stored message); a canary that answers 500s is rolled back, all traffic
goes to the stable version, and only an operator's reset brings it back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from functions.accounts.operations import mint_admin_key
from functions.control.canary import MODEL_VERSION_HEADER
from shared.fleet.pools import model_version
from shared.fleet.tables import tables
from shared.storage.sqlite.accounts import SQLiteStore
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import scripted_worker

STABLE_ANSWER = "The stable version answers this."
CANARY_ANSWER = "The canary version answers that."
CANARY_VERSION = "HuggingFaceTB/SmolLM2-135M-Instruct@canary-revision"
STABLE_VERSION = model_version(tables().pools["mini"], deployed=False)


def failing_worker() -> FastAPI:
    """A canary that accepts every request and fails it with a 500."""
    app = FastAPI()
    app.state.calls = 0

    @app.post("/v1/chat/completions")
    async def chat() -> JSONResponse:
        app.state.calls += 1
        return JSONResponse({"error": {"message": "boom", "type": "server_error"}}, status_code=500)

    return app


def _admin(gateway: Gateway) -> dict[str, str]:
    store = SQLiteStore(Path(gateway.data_dir) / "fleetchat.db")
    try:
        return {"authorization": f"Bearer {mint_admin_key(store, 'canary tests').key}"}
    finally:
        store.close()


def _ask(gateway: Gateway, session: str | None = None, **body: object) -> httpx.Response:
    headers = {**gateway.headers(), **({"x-session-id": session} if session else {})}
    payload = {"model": "mini", "messages": [{"role": "user", "content": "Which version are you?"}], **body}
    return httpx.post(f"{gateway.url}/v1/chat/completions", json=payload, headers=headers, timeout=30)


@pytest.fixture
def stable_worker() -> Iterator[tuple[str, FastAPI]]:
    worker = scripted_worker(STABLE_ANSWER)
    with serve(worker) as url:
        yield url, worker


def test_conversations_stick_to_one_version_and_record_it(
    gateway_for: GatewayFactory, stable_worker: tuple[str, FastAPI]
) -> None:
    stable_url, _ = stable_worker
    with serve(scripted_worker(CANARY_ANSWER)) as canary_url:
        canary = {"version": CANARY_VERSION, "weight": 0.5, "worker_urls": [canary_url]}
        gateway = gateway_for({"mini": [stable_url]}, canaries={"mini": canary})
        expected = {STABLE_VERSION: STABLE_ANSWER, CANARY_VERSION: CANARY_ANSWER}
        seen: set[str] = set()
        for i in range(16):
            first = _ask(gateway, store=True, stream=i % 2 == 0)
            assert first.status_code == 200
            version = first.headers[MODEL_VERSION_HEADER]
            conversation_id = first.headers["x-conversation-id"]
            for _ in range(2):  # later turns of the conversation: the same version every time
                later = _ask(gateway, conversation_id=conversation_id)
                assert later.headers[MODEL_VERSION_HEADER] == version
                assert later.json()["choices"][0]["message"]["content"] == expected[version]
            stored = httpx.get(f"{gateway.url}/v1/conversations/{conversation_id}", headers=gateway.headers()).json()
            answers = [m for m in stored["messages"] if m["role"] == "assistant"]
            assert [m["model_version"] for m in answers] == [version] * 3
            assert [m["content"] for m in answers] == [expected[version]] * 3
            seen.add(version)
        assert seen == set(expected)  # both versions served conversations (16 draws at even odds)
        # The canary's routing key is not a model anyone can ask for.
        refused = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={"model": "mini@canary", "messages": [{"role": "user", "content": "hi"}]},
            headers=gateway.headers(),
        )
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found"
        models = httpx.get(f"{gateway.url}/v1/models", headers=gateway.headers()).json()["data"]
        assert "mini@canary" not in [m["id"] for m in models]


def test_a_canary_answering_500s_is_rolled_back_until_an_operator_resets_it(
    gateway_for: GatewayFactory, stable_worker: tuple[str, FastAPI]
) -> None:
    stable_url, stable = stable_worker
    broken = failing_worker()
    with serve(broken) as canary_url:
        canary = {
            "version": CANARY_VERSION,
            "weight": 0.5,
            "worker_urls": [canary_url],
            "min_requests": 5,
            "error_margin": 0.1,
        }
        gateway = gateway_for({"mini": [stable_url]}, canaries={"mini": canary})
        admin = _admin(gateway)
        statuses = [_ask(gateway, f"session-{i}").status_code for i in range(40)]
        # The canary failed its first five (each a 502 to its client), then got nothing more.
        assert statuses.count(502) == 5 and broken.state.calls == 5
        assert statuses[-10:] == [200] * 10
        [status] = httpx.get(f"{gateway.url}/admin/v1/canaries", headers=admin).json()["data"]
        assert status["state"] == "rolled_back" and status["canary_errors"] == 5
        assert "100.0%" in status["rolled_back_reason"]
        after = [_ask(gateway, f"session-{i}", stream=bool(i % 2)) for i in range(20)]
        assert all(r.status_code == 200 and r.headers[MODEL_VERSION_HEADER] == STABLE_VERSION for r in after)
        assert broken.state.calls == 5
        metrics = httpx.get(f"{gateway.url}/metrics").text
        assert 'fleetchat_gateway_canary_rollbacks_total{pool="mini"} 1.0' in metrics
        assert 'fleetchat_gateway_canary_active{pool="mini"} 0.0' in metrics

        # A tenant key cannot reset it; an operator can, and the canary takes traffic again.
        reset = f"{gateway.url}/admin/v1/canaries/mini/reset"
        assert httpx.post(reset, headers=gateway.headers()).status_code == 401
        assert httpx.post(f"{gateway.url}/admin/v1/canaries/flagship/reset", headers=admin).status_code == 404
        assert httpx.post(reset, headers=admin).json()["state"] == "active"
        for i in range(40):
            _ask(gateway, f"session-{i}")
        assert broken.state.calls > 5
        assert stable.state.calls > 0

"""Workers answer only their gateway (real HTTP): a request without the worker key, or with another, is a 401 OpenAI
error; `/health` and `/metrics` stay open as on `vllm serve`; the gateway's client presents the key to the fleet's own
worker origins and to nothing else; a rotation accepts the old and the new key until the old one is dropped."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from pydantic import SecretStr

from gpu_workers.embeddings.server import create_embedding_app
from gpu_workers.server.app import create_worker_app
from shared.fleet.tables import tables
from shared.settings import Settings, WorkerSettings
from shared.wire.worker_auth import FleetWorkerAuth
from tests.support.servers import serve
from tests.unit.workers.test_worker_server import ScriptedEngine

CHAT = {"model": "mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_a_worker_with_a_key_refuses_every_request_without_it_but_health_and_metrics() -> None:
    with serve(create_worker_app(ScriptedEngine("abc"), accepted_keys=frozenset({"k-1"}))) as url:
        for headers in ({}, bearer("k-2"), {"authorization": "k-1"}, {"authorization": "Basic k-1"}):
            refused = httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=headers)
            assert refused.status_code == 401, headers
            assert refused.headers["www-authenticate"] == "Bearer"
            error = refused.json()["error"]
            assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_api_key")
            assert httpx.get(f"{url}/v1/models", headers=headers).status_code == 401
            assert httpx.get(f"{url}/anything", headers=headers).status_code == 401  # not only /v1, unlike vLLM
        assert httpx.get(f"{url}/health").status_code == 200
        assert httpx.get(f"{url}/metrics").status_code == 200
        answered = httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=bearer("k-1"))
        assert answered.status_code == 200 and answered.json()["choices"][0]["message"]["content"] == "abc"


def test_a_worker_without_keys_answers_anyone() -> None:
    """A standalone worker, like `vllm serve` without --api-key (its start logs a warning)."""
    with serve(create_worker_app(ScriptedEngine("abc"))) as url:
        assert httpx.post(f"{url}/v1/chat/completions", json=CHAT).status_code == 200


def test_the_embedding_worker_takes_the_same_key() -> None:
    pool = tables().embedding_pools["text-embedding-minilm"]

    def encode(texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), pool.dimensions), dtype=np.float32)

    app = create_embedding_app(pool, encode, accepted_keys=frozenset({"k-1"}))
    body = {"model": pool.name, "input": ["hello"]}
    with serve(app) as url:
        assert httpx.post(f"{url}/v1/embeddings", json=body).status_code == 401
        assert httpx.post(f"{url}/v1/embeddings", json=body, headers=bearer("k-1")).status_code == 200
        assert httpx.get(f"{url}/health").status_code == 200


def test_a_rotation_accepts_both_keys_until_the_old_one_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETCHAT_WORKER_API_KEY", "new")
    monkeypatch.setenv("FLEETCHAT_WORKER_ACCEPTED_API_KEYS", " old ,")
    during = Settings().worker.accepted_keys()
    assert during == {"new", "old"}
    with serve(create_worker_app(ScriptedEngine("abc"), accepted_keys=during)) as url:
        for key in ("old", "new"):  # gateways still on the old key and those already on the new one
            assert httpx.get(f"{url}/v1/models", headers=bearer(key)).status_code == 200
    monkeypatch.delenv("FLEETCHAT_WORKER_ACCEPTED_API_KEYS")
    after = Settings().worker.accepted_keys()
    with serve(create_worker_app(ScriptedEngine("abc"), accepted_keys=after)) as url:
        assert httpx.get(f"{url}/v1/models", headers=bearer("old")).status_code == 401
        assert httpx.get(f"{url}/v1/models", headers=bearer("new")).status_code == 200


def test_the_gateway_presents_the_credential_to_its_own_workers_only() -> None:
    seen: dict[str, dict[str, str]] = {}

    def record(request: httpx.Request) -> httpx.Response:
        seen[str(request.url)] = dict(request.headers)
        return httpx.Response(200, json={})

    worker = WorkerSettings.model_construct(
        api_key=SecretStr("k-1"), proxy_token_id="wk-1", proxy_token_secret=SecretStr("ws-1")
    )
    auth = FleetWorkerAuth(["http://127.0.0.1:8100", "https://mini.modal.run"], worker.credential_headers())
    with httpx.Client(transport=httpx.MockTransport(record), auth=auth) as client:
        client.post("http://127.0.0.1:8100/v1/chat/completions", headers=bearer("someone-else"))
        client.get("https://mini.modal.run/v1/models")
        client.post("https://api.provider.example/v1/chat/completions", headers=bearer("provider-key"))
        client.get("http://127.0.0.1:8101/v1/models")  # another port: not one of the fleet's workers
    local = seen["http://127.0.0.1:8100/v1/chat/completions"]
    assert local["authorization"] == "Bearer k-1"  # ours to set: a caller's header never reaches a worker instead
    deployed = seen["https://mini.modal.run/v1/models"]
    assert (deployed["modal-key"], deployed["modal-secret"]) == ("wk-1", "ws-1")
    provider = seen["https://api.provider.example/v1/chat/completions"]
    assert provider["authorization"] == "Bearer provider-key" and "modal-key" not in provider
    assert "authorization" not in seen["http://127.0.0.1:8101/v1/models"]


def test_the_fleets_own_workers_are_its_pools_canaries_embedding_pools_and_its_own_guard() -> None:
    fleet = {
        "worker_urls": {"mini": ["http://w1:8100"], "flagship": ["http://w2:8100"]},
        "canaries": {"mini": {"version": "v2", "weight": 0.1, "worker_urls": ["http://canary:8100"]}},
        "embedding_worker_urls": {"text-embedding-minilm": ["http://e:8100"]},
    }
    remote = Settings(**fleet, guard={"kind": "llama_guard", "url": "http://guard:8100"})
    assert set(remote.own_worker_urls()) == {"http://w1:8100", "http://w2:8100", "http://canary:8100", "http://e:8100"}
    own = Settings(**fleet, guard={"kind": "llama_guard", "url": "http://guard:8100", "own_pool": True})
    assert set(own.own_worker_urls()) == set(remote.own_worker_urls()) | {"http://guard:8100"}

"""The operator config file in a real gateway process: a hosted OpenAI-compatible endpoint serves a tier (its key sent,
its model id used, over real HTTP), and a changed file's limits apply without a restart while a broken file leaves the
last good config in force."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from fastapi import Request
from fastapi.responses import JSONResponse

from functions.accounts.operations import create_tenant_with_key
from shared.fleet.tables import BUILTIN_FILE
from shared.fleet.tiers import Tier
from shared.storage.sqlite.accounts import SQLiteStore
from tests.support.operator_file import shipped_text
from tests.support.processes import ProcessGroup, free_port, wait_http_ok
from tests.support.prom import labelled
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import scripted_worker

SHIPPED = BUILTIN_FILE  # the built-in tables; shipped_text() adds the settings-level sections
HOSTED_KEY = "sk-hosted-test-key"
HOSTED_ANSWER = "An answer from the hosted model."
DEADLINE_S = 30.0


@dataclass
class Stack:
    url: str
    data_dir: Path
    config: Path
    log: Path
    hosted_calls: list[dict]

    def key(self, tier: Tier) -> str:
        store = SQLiteStore(self.data_dir / "fleetchat.db")
        try:
            return create_tenant_with_key(store, f"{tier.value}-{time.monotonic_ns()}", tier, "k")[1].key
        finally:
            store.close()

    def write_config(self, text: str) -> None:
        """As a careful operator (or a ConfigMap) does: a whole new file renamed into place."""
        staged = self.config.with_suffix(".staged")
        staged.write_text(text)
        os.replace(staged, self.config)

    def wait_for_log(self, needle: str, count: int) -> str:
        deadline = time.monotonic() + DEADLINE_S
        while (text := self.log.read_text()).count(needle) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} x{count} not logged within {DEADLINE_S:.0f} s:\n{text[-3000:]}")
            time.sleep(0.1)
        return text


def config_text(free_rpm: int, hosted_url: str) -> str:
    """The shipped file with a hosted pool serving the plus tier first, and the free tier's RPM set."""
    text = shipped_text()
    hosted = (
        "external_pools:\n"
        "  hosted:\n"
        "    description: A hosted model behind an OpenAI-compatible API.\n"
        f"    external: {{base_url: '{hosted_url}/v1', model: provider-model-x, api_key_env: HOSTED_TEST_KEY}}\n"
        "    max_model_len: 16384\n"
        "    price: {prompt_usd_per_mtok: 1.0, completion_usd_per_mtok: 2.0}\n"
        "    list_price: {input_usd_per_mtok: 3.0, cached_input_usd_per_mtok: 1.5, output_usd_per_mtok: 12.0}\n"
    )
    text = text.replace("external_pools: {}\n", hosted)
    plus = "    pools: [flagship, mini, vision]\n    default_pool: flagship\n    retention_days: 90\n"
    assert plus in text
    text = text.replace(plus, "    pools: [hosted, flagship, mini]\n    default_pool: hosted\n    retention_days: 90\n")
    for field in ("key_rpm", "tenant_rpm"):
        text = text.replace(f"{field}: 20\n", f"{field}: {free_rpm}\n", 1)
    return text.replace("message_cap: 40 ", "message_cap: null ", 1)


def hosted_endpoint(calls: list[dict]):  # -> FastAPI
    """The scripted worker behind a bearer-key check, recording what each call carried."""
    app = scripted_worker(HOSTED_ANSWER)

    @app.middleware("http")
    async def require_key(request: Request, call_next):  # type: ignore[no-untyped-def]
        if request.headers.get("authorization") != f"Bearer {HOSTED_KEY}":
            error = {
                "message": "Incorrect API key provided.",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
            return JSONResponse({"error": error}, status_code=401)
        body = json.loads(await request.body())
        calls.append({"path": request.url.path, "body": body, "headers": dict(request.headers)})
        return await call_next(request)

    return app


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("operator-config")
    group = ProcessGroup(root / "logs")
    calls: list[dict] = []
    with serve(scripted_worker("A local answer.")) as local, serve(hosted_endpoint(calls)) as hosted:
        config = root / "fleetchat.yaml"
        config.write_text(config_text(1000, hosted))
        port = free_port()
        try:
            env = {
                "FLEETCHAT_CONFIG_FILE": str(config),
                "HOSTED_TEST_KEY": HOSTED_KEY,
                "FLEETCHAT_WORKER_URLS": json.dumps({"mini": [local], "flagship": [local]}),
                "FLEETCHAT_POOLS": json.dumps(["mini", "flagship"]),
            }
            args = ["gateway", "--port", str(port), "--data-dir", str(root / "data")]
            proc = group.spawn(f"gateway-{port}", args, env=env)
            log = group.logs / f"gateway-{port}.log"
            # Generous: the gateway loads its safety models first, slow on busy shared cores.
            wait_http_ok(f"http://127.0.0.1:{port}/metrics", proc, log, timeout_s=240)
            yield Stack(f"http://127.0.0.1:{port}", root / "data", config, log, calls)
        finally:
            group.stop()


def test_a_hosted_endpoint_serves_a_tier(stack: Stack) -> None:
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=stack.key(Tier.PLUS), max_retries=0)
    answer = client.chat.completions.create(model="hosted", messages=[{"role": "user", "content": "hello"}])
    assert answer.choices[0].message.content == HOSTED_ANSWER
    streamed = client.chat.completions.create(
        model="hosted", messages=[{"role": "user", "content": "hello again"}], stream=True
    )
    assert "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices) == HOSTED_ANSWER
    assert [call["path"] for call in stack.hosted_calls] == ["/v1/chat/completions"] * 2
    for call in stack.hosted_calls:
        assert call["body"]["model"] == "provider-model-x"  # the provider's id, not the pool's name
        assert "modal-session-id" not in call["headers"]
    assert stack.hosted_calls[1]["body"]["stream_options"] == {"include_usage": True}  # no vLLM-only options
    assert "hosted" in [model.id for model in client.models.list()]
    # Its spend is counted at the provider's price (when each request's books close, just after its last byte).
    deadline = time.monotonic() + DEADLINE_S
    while labelled(stack.url, "fleetchat_gateway_spend_usd_total", tier="plus", pool="hosted") <= 0:
        assert time.monotonic() < deadline, "no spend counted for the hosted pool"
        time.sleep(0.1)
    # A free tenant's tier does not include the hosted pool.
    free = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=stack.key(Tier.FREE), max_retries=0)
    with pytest.raises(openai.NotFoundError):
        free.chat.completions.create(model="hosted", messages=[{"role": "user", "content": "hi"}])


def ask(stack: Stack, key: str) -> httpx.Response:
    body = {"model": "mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    return httpx.post(f"{stack.url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"})


def test_a_pool_with_list_prices_shows_them_and_usage_is_priced_at_them(stack: Stack) -> None:
    key = stack.key(Tier.PLUS)
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0)
    answer = client.chat.completions.create(model="hosted", messages=[{"role": "user", "content": "price me"}])
    cards = {card.id: card.model_extra or {} for card in client.models.list()}
    assert cards["hosted"]["pricing"] == {
        "input_usd_per_mtok": 3.0,
        "cached_input_usd_per_mtok": 1.5,
        "output_usd_per_mtok": 12.0,
        "batch_multiplier": 0.5,  # a batch line's share of these (docs/batches.md); the default
    }
    assert cards["mini"]["pricing"] is None  # no list price set: none shown, nothing priced
    headers = {"authorization": f"Bearer {key}"}
    deadline = time.monotonic() + DEADLINE_S
    while (report := httpx.get(f"{stack.url}/v1/usage", headers=headers).json())["by_model"].get("hosted") is None:
        assert time.monotonic() < deadline, "the hosted answer never reached the ledger"
        time.sleep(0.1)
    hosted = report["by_model"]["hosted"]
    assert answer.usage is not None and hosted["completion_tokens"] >= answer.usage.completion_tokens
    uncached = hosted["prompt_tokens"] - hosted["cached_tokens"]
    expected = (uncached * 3.0 + hosted["cached_tokens"] * 1.5 + hosted["completion_tokens"] * 12.0) / 1e6
    assert hosted["cost_usd"] == round(expected, 6) and hosted["cost_usd"] > 0
    assert report["totals"]["cost_usd"] == hosted["cost_usd"]  # the only priced model
    assert all(day["cost_usd"] is None for day in report["data"] if day["model"] != "hosted")


def test_a_lowered_limit_applies_without_restart_and_a_broken_file_keeps_it(stack: Stack) -> None:
    key = stack.key(Tier.FREE)
    first = [ask(stack, key) for _ in range(3)]
    assert [r.status_code for r in first] == [200] * 3
    assert first[0].headers["x-ratelimit-limit-requests"] == "1000"
    text = stack.config.read_text()
    stack.write_config(
        text.replace("key_rpm: 1000\n", "key_rpm: 2\n", 1).replace("tenant_rpm: 1000\n", "tenant_rpm: 2\n", 1)
    )
    stack.wait_for_log("config reloaded from", 1)
    lowered = [ask(stack, key) for _ in range(5)]
    assert 429 in [r.status_code for r in lowered]
    refused = next(r for r in lowered if r.status_code == 429)
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.headers["x-ratelimit-limit-requests"] == "2"
    # A broken file (a raised limit and an unknown key): refused with its place, the lowered limit stays in force.
    broken = stack.config.read_text().replace("  key_rpm: 2\n", "  key_rpm: 500\n      burst: 10\n", 1)
    stack.write_config(broken)
    log = stack.wait_for_log("config reload refused", 1)
    line = next(i for i, text in enumerate(broken.splitlines(), 1) if "burst: 10" in text)
    assert f"{stack.config}:{line}: tiers.free.limits.burst: unknown key" in log
    still = [ask(stack, key) for _ in range(5)]
    assert 429 in [r.status_code for r in still]
    assert all(r.headers["x-ratelimit-limit-requests"] == "2" for r in still)

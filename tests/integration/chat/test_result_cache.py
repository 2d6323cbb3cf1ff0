"""The prompt/result cache through a real gateway on loopback, the `openai` SDK as the client and scripted workers
that count their calls: a hit never reaches a worker, is billed as cached tokens and replays as valid OpenAI SSE;
another tenant, another model version, sampling, PII, `cache-control`, filtered or failed answers and expiry all
keep the worker answering (docs/result-cache.md)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from functions.chat.result_cache.cache import CACHE_HEADER
from functions.control.canary import MODEL_VERSION_HEADER
from functions.metering.meters import ledger_values, meters_from_settings
from shared.api_keys import hash_api_key, new_api_key
from shared.fleet.tiers import Tier
from shared.settings import Settings
from shared.storage.sqlite.accounts import SQLiteStore
from shared.storage.sqlite.ledger import SQLiteLedger
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import PROMPT_TOKENS, scripted_worker

ANSWER = "Porto's Ribeira is best seen from the upper deck of the Dom Luís I bridge at dusk."
PIECES = -(-len(ANSWER) // 4)  # the scripted worker's completion tokens: one per 4 characters
HARMFUL = (
    "Sure, I can walk you through it. To put together a pipe bomb you will need a steel pipe, two end caps and "
    "a fuse, and then you pack it tightly before you seal the second cap."
)
PII_ANSWER = "You can reach our account manager John at john.doe@example.com during the week."
QUESTION = [{"role": "user", "content": "Where is the best view of Porto?"}]


def _client(gateway: Gateway, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key or gateway.key, max_retries=0)


def _ask(gateway: Gateway, key: str | None = None, headers: dict[str, str] | None = None, **body: Any) -> Any:
    """A non-streamed request through the SDK: (the cache header, the completion)."""
    ask: dict[str, Any] = {"model": "mini", "messages": QUESTION, "temperature": 0, **body}
    raw = _client(gateway, key).chat.completions.with_raw_response.create(**ask, extra_headers=headers or {})
    return raw.headers.get(CACHE_HEADER), raw.parse()


def _stream(gateway: Gateway, **body: Any) -> tuple[str | None, list[Any]]:
    ask: dict[str, Any] = {"model": "mini", "messages": QUESTION, "temperature": 0, "stream": True, **body}
    with _client(gateway).chat.completions.with_streaming_response.create(**ask) as response:
        return response.headers.get(CACHE_HEADER), list(response.parse())


def _text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _ledger(gateway: Gateway) -> list[tuple[int, int, int, str]]:
    with sqlite3.connect(Path(gateway.data_dir) / "fleetchat.db") as db:
        rows = db.execute(
            "SELECT prompt_tokens, completion_tokens, cached_tokens, outcome FROM ledger ORDER BY created_at"
        ).fetchall()
    return [tuple(row) for row in rows]


def _lookups(gateway: Gateway, outcome: str) -> float:
    for line in httpx.get(f"{gateway.url}/metrics", timeout=10).text.splitlines():
        if line.startswith("fleetchat_gateway_result_cache_lookups_total{") and f'outcome="{outcome}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def worker() -> Iterator[tuple[str, FastAPI]]:
    app = scripted_worker(ANSWER)
    with serve(app) as url:
        yield url, app


def test_an_identical_deterministic_request_is_answered_from_the_cache(
    gateway_for: GatewayFactory, worker: tuple[str, FastAPI]
) -> None:
    url, app = worker
    gateway = gateway_for({"mini": [url]})
    first_header, first = _ask(gateway)
    second_header, second = _ask(gateway)
    assert (first_header, second_header) == ("miss", "hit")
    assert app.state.calls == 1, "the hit reached the worker"
    assert second.choices[0].message.content == first.choices[0].message.content == ANSWER
    assert second.choices[0].finish_reason == "stop" and second.id != first.id
    assert second.usage.prompt_tokens == PROMPT_TOKENS and second.usage.completion_tokens == PIECES
    assert second.usage.prompt_tokens_details.cached_tokens == PROMPT_TOKENS

    # Field order, an int temperature and a stop string vs a one-item list are the same request.
    body = {"temperature": 0.0, "messages": QUESTION, "model": "mini", "stop": ["\n\n"]}
    assert _ask(gateway, **{**body, "stop": ["\n\n"]})[0] == "miss"
    assert _ask(gateway, **{**body, "stop": "\n\n"})[0] == "hit"
    assert app.state.calls == 2

    # The same request streamed: the cached answer replayed as OpenAI chunks, usage when asked.
    header, chunks = _stream(gateway, stream_options={"include_usage": True})
    assert header == "hit" and app.state.calls == 2
    assert _text(chunks) == ANSWER
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert len({c.id for c in chunks}) == 1 and chunks[0].id not in (first.id, second.id)
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == PROMPT_TOKENS + PIECES
    assert all(c.usage is None for c in chunks[:-1])

    # Billed as cached tokens: the miss as the worker counted it, each hit's P + C as cached input only.
    ledger = _ledger(gateway)
    assert ledger[0] == (PROMPT_TOKENS, PIECES, 0, "completed")
    hit = (PROMPT_TOKENS + PIECES, 0, PROMPT_TOKENS + PIECES, "completed")
    assert [ledger[1], ledger[3], ledger[4]] == [hit, hit, hit]
    # What the Stripe export makes of it: the hits' tokens only on the cached-input meter, nothing billed twice.
    ledger_store = SQLiteLedger(Path(gateway.data_dir) / "fleetchat.db")
    try:
        totals = ledger_store.totals(datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))
    finally:
        ledger_store.close()
    settings = Settings()
    billed = {event: value for (_, event), value in ledger_values(totals, meters_from_settings(settings)).items()}
    assert billed == {
        settings.meter.event_input: PROMPT_TOKENS + PROMPT_TOKENS,  # the two misses' prompts
        settings.meter.event_cached_input: 3 * (PROMPT_TOKENS + PIECES),
        settings.meter.event_output: 2 * PIECES,  # the two misses' completions
        settings.meter.event_embedding_input: 0,  # embeddings have their own meter; none were asked for
        settings.meter.event_rerank_input: 0,  # so has re-ranking (issue 49)
        settings.meter.event_batch_input: 0,  # no batch lines either (issue 48)
        settings.meter.event_batch_cached_input: 0,
        settings.meter.event_batch_output: 0,
        settings.meter.event_batch_embedding_input: 0,
    }
    assert (_lookups(gateway, "hit"), _lookups(gateway, "miss")) == (3.0, 2.0)


def test_a_replayed_stream_is_valid_sse_with_one_done(gateway_for: GatewayFactory, worker: tuple[str, FastAPI]) -> None:
    url, app = worker
    gateway = gateway_for({"mini": [url]})
    header, chunks = _stream(gateway)  # a streamed miss is stored at its end, before its [DONE]
    assert header == "miss" and _text(chunks) == ANSWER
    body = {"model": "mini", "messages": QUESTION, "temperature": 0, "stream": True}
    with httpx.stream(
        "POST", f"{gateway.url}/v1/chat/completions", json=body, headers=gateway.headers(), timeout=30
    ) as response:
        assert response.headers[CACHE_HEADER] == "hit"
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = response.read().decode()
    assert app.state.calls == 1
    events = [e for e in raw.split("\n\n") if e]
    # Each event: an `id:` line (the resumable-stream buffer numbers every event), then one `data:` line.
    ids = [int(e.split("\n")[0].removeprefix("id: ")) for e in events]
    assert ids == list(range(1, len(events) + 1))
    data = [e.split("\n")[1] for e in events]
    assert all(len(e.split("\n")) == 2 for e in events)
    assert data[-1] == "data: [DONE]" and raw.count("[DONE]") == 1
    assert all(d.startswith("data: {") for d in data[:-1])
    parsed = [json.loads(d.removeprefix("data: ")) for d in data[:-1]]
    assert parsed[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(p["object"] == "chat.completion.chunk" and "usage" not in p for p in parsed)
    assert "".join(p["choices"][0]["delta"].get("content") or "" for p in parsed) == ANSWER
    assert _ask(gateway)[0] == "hit"  # and the non-streamed form of the same request


def test_other_tenants_sampling_and_cache_control_reach_the_worker(
    gateway_for: GatewayFactory, worker: tuple[str, FastAPI]
) -> None:
    url, app = worker
    gateway = gateway_for({"mini": [url]})
    assert _ask(gateway)[0] == "miss"
    assert _ask(gateway, key=gateway.other_key)[0] == "miss", "another tenant was served this tenant's answer"
    assert app.state.calls == 2
    assert [_ask(gateway, temperature=0.7)[0] for _ in range(2)] == ["uncacheable", "uncacheable"]
    # The local engine ignores `seed`: a seeded sampled request is not deterministic here.
    assert [_ask(gateway, temperature=0.7, seed=7)[0] for _ in range(2)] == ["uncacheable", "uncacheable"]
    assert app.state.calls == 6
    assert _ask(gateway, headers={"cache-control": "no-cache"})[0] == "bypass"
    assert app.state.calls == 7
    assert _ask(gateway, max_tokens=17)[0] == "miss"  # another output budget is another request
    fresh = [{"role": "user", "content": "And the best view of Lisbon?"}]
    assert _ask(gateway, messages=fresh, headers={"cache-control": "no-store"})[0] == "miss"
    assert _ask(gateway, messages=fresh)[0] == "miss", "a no-store answer was stored"
    assert _ask(gateway)[0] == "hit"
    assert app.state.calls == 10
    assert _lookups(gateway, "bypass") == 1.0 and _lookups(gateway, "uncacheable") == 4.0


def test_a_new_model_version_never_serves_an_old_answer(
    gateway_for: GatewayFactory, worker: tuple[str, FastAPI]
) -> None:
    stable_url, stable = worker
    canary_app = scripted_worker("The canary version answers that.")
    with serve(canary_app) as canary_url:
        canary = {"version": "SmolLM2@canary-revision", "weight": 0.5, "worker_urls": [canary_url]}
        gateway = gateway_for({"mini": [stable_url]}, canaries={"mini": canary})
        seen: dict[str, list[str]] = {}
        for i in range(12):  # the session picks the version; the request body is the same every time
            headers = {"x-session-id": f"session-{i}"}
            raw = _client(gateway).chat.completions.with_raw_response.create(
                model="mini", messages=QUESTION, temperature=0, extra_headers=headers
            )
            seen.setdefault(raw.headers[MODEL_VERSION_HEADER], []).append(raw.headers[CACHE_HEADER])
    assert len(seen) == 2, "both versions should have answered"
    for outcomes in seen.values():
        assert outcomes[0] == "miss" and set(outcomes[1:]) <= {"hit"}
    assert (stable.state.calls, canary_app.state.calls) == (1, 1)


def test_pii_in_the_request_or_the_answer_is_never_stored(
    gateway_for: GatewayFactory, worker: tuple[str, FastAPI]
) -> None:
    url, app = worker
    gateway = gateway_for({"mini": [url]})
    personal = [{"role": "user", "content": "Write to jane.roe@example.org about the Porto trip."}]
    assert [_ask(gateway, messages=personal)[0] for _ in range(2)] == ["uncacheable", "uncacheable"]
    assert app.state.calls == 2
    pii_worker = scripted_worker(PII_ANSWER)
    with serve(pii_worker) as pii_url:
        leaky = gateway_for({"mini": [pii_url]})
        assert [_ask(leaky)[0] for _ in range(2)] == ["miss", "miss"]
        assert _stream(leaky)[0] == "miss"
        assert _stream(leaky)[0] == "miss"
    assert pii_worker.state.calls == 4
    with sqlite3.connect(Path(gateway.data_dir) / "result-cache.db") as db:
        stored = [row[0] for row in db.execute("SELECT content FROM result_cache")]
    assert stored == []


def test_filtered_answers_are_never_cached(gateway_for: GatewayFactory) -> None:
    harmful = scripted_worker(HARMFUL)
    with serve(harmful) as url:
        gateway = gateway_for({"mini": [url]})
        for _ in range(2):
            header, answer = _ask(gateway)
            assert header == "miss" and answer.choices[0].finish_reason == "content_filter"
        for _ in range(2):
            header, chunks = _stream(gateway)
            assert header == "miss" and chunks[-1].choices[0].finish_reason == "content_filter"
    assert harmful.state.calls == 4


def failing_once_worker() -> FastAPI:
    """Streams half an answer then an error event on its first call; answers in full afterwards."""
    app = FastAPI()
    app.state.calls = 0

    @app.post("/v1/chat/completions")
    async def chat(body: dict) -> StreamingResponse:
        app.state.calls += 1
        broken = app.state.calls == 1

        async def events() -> AsyncIterator[bytes]:
            usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": 1, "total_tokens": PROMPT_TOKENS + 1}
            base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "mini", "usage": usage}
            first = {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Half "}}]}
            yield b"data: " + json.dumps(first).encode() + b"\n\n"
            await asyncio.sleep(0)
            if broken:
                error = {"error": {"message": "engine failed", "type": "server_error", "param": None, "code": None}}
                yield b"event: error\ndata: " + json.dumps(error).encode() + b"\n\n"
            else:
                done = {**base, "choices": [{"index": 0, "delta": {"content": "whole."}, "finish_reason": "stop"}]}
                yield b"data: " + json.dumps(done).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def test_a_failed_answer_is_never_cached(gateway_for: GatewayFactory) -> None:
    app = failing_once_worker()
    with serve(app) as url:
        gateway = gateway_for({"mini": [url]}, max_continuations=0)
        with pytest.raises(openai.APIError):
            _stream(gateway)
        header, chunks = _stream(gateway)
        assert header == "miss" and _text(chunks) == "Half whole."
        assert _stream(gateway)[0] == "hit"
    assert app.state.calls == 2


def test_answers_expire_and_a_tier_can_turn_the_cache_off(
    gateway_for: GatewayFactory, worker: tuple[str, FastAPI]
) -> None:
    url, app = worker
    gateway = gateway_for(
        {"mini": [url]},
        result_cache={"ttl_s": {"plus": 1}},
    )
    assert _ask(gateway)[0] == "miss"
    time.sleep(1.1)  # past the one-second TTL (an expired entry is never served, whatever the store still holds)
    assert _ask(gateway)[0] == "miss"
    assert app.state.calls == 2

    store = SQLiteStore(Path(gateway.data_dir) / "fleetchat.db")
    tenant = store.create_tenant("acme", Tier.ENTERPRISE)  # the enterprise tier's cache is off by default
    key = new_api_key()
    store.add_api_key(tenant.id, hash_api_key(key), "acme")
    store.close()
    assert [_ask(gateway, key=key)[0] for _ in range(2)] == ["uncacheable", "uncacheable"]
    assert app.state.calls == 4


def test_a_hit_on_a_stored_conversation_saves_the_turn(
    gateway_for: GatewayFactory, worker: tuple[str, FastAPI]
) -> None:
    url, app = worker
    gateway = gateway_for({"mini": [url]})
    first = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "mini", "messages": QUESTION, "temperature": 0, "store": True},
        headers=gateway.headers(),
        timeout=30,
    )
    # A second conversation that starts the same way: the same rendered request, answered from the cache.
    second = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "mini", "messages": QUESTION, "temperature": 0, "store": True, "stream": True},
        headers=gateway.headers(),
        timeout=30,
    )
    assert (first.headers[CACHE_HEADER], second.headers[CACHE_HEADER]) == ("miss", "hit")
    assert app.state.calls == 1
    conversation_id = second.headers["x-conversation-id"]
    assert conversation_id != first.headers["x-conversation-id"]
    closing = json.loads(second.text.split("\n\n")[-3].split("\n")[-1].removeprefix("data: "))
    assert closing["conversation"]["stored"] is True
    stored = httpx.get(f"{gateway.url}/v1/conversations/{conversation_id}", headers=gateway.headers(), timeout=30)
    messages = stored.json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] and messages[1]["content"] == ANSWER


def test_the_account_erase_empties_the_tenants_cache(gateway_for: GatewayFactory, worker: tuple[str, FastAPI]) -> None:
    url, app = worker
    gateway = gateway_for({"mini": [url]})
    assert [_ask(gateway)[0], _ask(gateway, key=gateway.other_key)[0]] == ["miss", "miss"]
    erased = httpx.delete(f"{gateway.url}/v1/account/data", headers=gateway.headers(), timeout=30)
    assert erased.status_code == 200
    assert _ask(gateway)[0] == "miss", "an erased tenant's answer was still served"
    assert _ask(gateway, key=gateway.other_key)[0] == "hit"  # another tenant's entries stay
    assert app.state.calls == 3

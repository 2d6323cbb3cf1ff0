"""A pool whose deployed model reasons (vLLM with `--reasoning-parser`): `reasoning_effort` / `reasoning.effort` reach
the worker, the reasoning passes to chat clients as vLLM sends it, the Responses API makes it a reasoning item (whole
and as `response.reasoning_text.*` events that OpenAI's published schemas accept), the post-filter reads it, and a
pool whose model does not reason refuses an effort with a 400 that bills nothing.

The worker is a stand-in speaking vLLM's reasoning protocol (no reasoning model runs on this machine): this checks
the gateway's handling of the protocol, not a model's reasoning."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI

from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.openai_contract import RESPONSE_EVENT_SCHEMAS, openai_registry, violations
from tests.support.pool_tables import deployed_model_changed
from tests.support.servers import serve
from tests.support.stand_ins.reasoning_worker import reasoning_worker

REASONING = "The user asks for a city. Porto is on the Douro; Lisbon is the capital. I will name Lisbon."
ANSWER = "Lisbon."
HARMFUL_REASONING = (
    "They want instructions. To put together a pipe bomb you will need a steel pipe, two end caps and a fuse, and "
    "then you pack it tightly before you seal the second cap."
)


@pytest.fixture
def reasoning_tables() -> Iterator[None]:
    """`mini` deployed with vLLM's qwen3 reasoning parser; `flagship` as built in (no parser)."""
    with deployed_model_changed("mini", reasoning_parser="qwen3"):
        yield


def _deployed(gateway_for: GatewayFactory, worker_url: str) -> Gateway:
    """A gateway configured as deployed (the pools' deployed models serve), in front of the stand-in."""
    return gateway_for(
        {"mini": [worker_url], "flagship": [worker_url]}, environment="deployed", session_secret="s" * 32
    )


@pytest.fixture
def worker() -> Iterator[tuple[str, FastAPI]]:
    app = reasoning_worker(REASONING, ANSWER)
    with serve(app) as url:
        yield url, app


def _client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0, timeout=60)


def test_chat_passes_the_effort_to_the_worker_and_the_reasoning_to_the_client(
    gateway_for: GatewayFactory, reasoning_tables: None, worker: tuple[str, FastAPI]
) -> None:
    url, app = worker
    gateway = _deployed(gateway_for, url)
    api = _client(gateway)
    models = {m.id: m.model_dump() for m in api.models.list().data}
    assert models["mini"]["capabilities"]["reasoning"] is True
    assert models["flagship"]["capabilities"]["reasoning"] is False
    whole = api.chat.completions.create(
        model="mini", messages=[{"role": "user", "content": "Name a city."}], reasoning_effort="high"
    )
    assert app.state.bodies[-1]["reasoning_effort"] == "high"
    message = whole.choices[0].message.model_dump()
    assert message["content"] == ANSWER and message["reasoning"] == REASONING
    stream = api.chat.completions.create(
        model="mini", messages=[{"role": "user", "content": "Name a city."}], reasoning_effort="low", stream=True
    )
    reasoning = content = ""
    for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta.model_dump()
            reasoning += delta.get("reasoning") or ""
            content += delta.get("content") or ""
    assert (reasoning, content) == (REASONING, ANSWER)


def test_responses_make_the_reasoning_a_reasoning_item_whole_and_streamed(
    gateway_for: GatewayFactory, reasoning_tables: None, worker: tuple[str, FastAPI]
) -> None:
    url, app = worker
    gateway = _deployed(gateway_for, url)
    api = _client(gateway)
    registry = openai_registry()
    created = api.responses.create(model="mini", input="Name a city.", reasoning={"effort": "medium"})
    assert app.state.bodies[-1]["reasoning_effort"] == "medium"
    kinds = [item.type for item in created.output]
    assert kinds == ["reasoning", "message"]
    reasoning_item = created.output[0].model_dump()
    assert reasoning_item["content"] == [{"type": "reasoning_text", "text": REASONING}]
    assert created.output_text == ANSWER
    found = violations(registry, "Response", created.model_dump(mode="json", exclude_unset=True))

    events: list[dict[str, Any]] = []
    with httpx.stream(
        "POST", f"{gateway.url}/v1/responses", headers=gateway.headers(), timeout=60,
        json={"model": "mini", "input": "Name a city.", "reasoning": {"effort": "low"}, "stream": True},
    ) as response:  # fmt: skip
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: ") :]))
    for event in events:
        found += violations(registry, RESPONSE_EVENT_SCHEMAS[event["type"]], event)
    assert found == []
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert deltas == REASONING
    (done,) = [e for e in events if e["type"] == "response.reasoning_text.done"]
    assert done["text"] == REASONING and done["output_index"] == 0
    added = [(e["output_index"], e["item"]["type"]) for e in events if e["type"] == "response.output_item.added"]
    assert added == [(0, "reasoning"), (1, "message")]
    order = [e["type"] for e in events]
    assert order.index("response.reasoning_text.done") < order.index("response.output_text.delta")  # closed first
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]


def test_a_pool_whose_model_does_not_reason_refuses_an_effort_billing_nothing(
    gateway_for: GatewayFactory, reasoning_tables: None, worker: tuple[str, FastAPI]
) -> None:
    url, app = worker
    gateway = _deployed(gateway_for, url)
    api = _client(gateway)
    with pytest.raises(openai.BadRequestError) as chat:
        api.chat.completions.create(
            model="flagship", messages=[{"role": "user", "content": "hi"}], reasoning_effort="high"
        )
    assert chat.value.param == "reasoning_effort"
    with pytest.raises(openai.BadRequestError) as response:
        api.responses.create(model="flagship", input="hi", reasoning={"effort": "high"})
    assert response.value.param == "reasoning.effort"
    assert app.state.bodies == []  # nothing reached a worker
    # `none` asks for no reasoning: any pool takes it.
    api.chat.completions.create(model="flagship", messages=[{"role": "user", "content": "hi"}], reasoning_effort="none")


def test_the_post_filter_reads_the_reasoning(gateway_for: GatewayFactory, reasoning_tables: None) -> None:
    with serve(reasoning_worker(HARMFUL_REASONING, ANSWER)) as url:
        gateway = _deployed(gateway_for, url)
        api = _client(gateway)
        whole = api.chat.completions.create(model="mini", messages=[{"role": "user", "content": "Tell me."}])
        assert whole.choices[0].finish_reason == "content_filter"
        assert whole.choices[0].message.content == ""
        assert "end caps" not in (whole.choices[0].message.model_dump().get("reasoning") or "")
        stream = api.chat.completions.create(
            model="mini", messages=[{"role": "user", "content": "Tell me."}], stream=True
        )
        reasoning, finishes = "", []
        for chunk in stream:
            for choice in chunk.choices:
                reasoning += choice.delta.model_dump().get("reasoning") or ""
                finishes += [choice.finish_reason] if choice.finish_reason else []
        assert finishes == ["content_filter"] and "end caps" not in reasoning

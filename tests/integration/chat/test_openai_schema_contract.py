"""Every body fleetchat sends on an endpoint OpenAI's published description covers validates against OpenAI's own
schema (tests/contracts/openai_schemas.json, pinned by commit): chat completions whole and streamed (with
log-probabilities, tool calls and a result-cache hit), completions whole and streamed with `echo`, responses created,
streamed (every event), retrieved and their input items, embeddings, models, moderations and error bodies, all from the
real gateway and workers.

The schema is read as OpenAI means it: its OpenAPI 3.0 `nullable: true` (kept in a 3.1 document) allows null. Two
known gaps between OpenAI's schema and OpenAI's own API are allowed, and only they, on legacy completions: with
`echo`, the first prompt token's `token_logprobs` and `top_logprobs` entries are null (nothing predicts it; the API
sends null and lm-evaluation-harness reads it), and a streamed chunk's `finish_reason` is null until the last (the
schema shares the whole response's shape, where it is always set)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from referencing import Registry

from tests.conftest import Stack
from tests.support.openai_contract import RESPONSE_EVENT_SCHEMAS, openai_registry, violations

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "Name one colour."}]
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def registry() -> Registry:
    return openai_registry()


def with_known_gaps_closed(body: dict[str, Any], *, streamed: bool) -> dict[str, Any]:
    """A legacy completion with the two known gaps (module docstring) filled as the schema expects; nothing else
    changed, so anything else that fails still fails."""
    body = copy.deepcopy(body)
    for choice in body.get("choices") or []:
        logprobs = choice.get("logprobs") or {}
        for name, filler in (("token_logprobs", 0.0), ("top_logprobs", {})):
            values = logprobs.get(name)
            if values and values[0] is None:
                values[0] = filler
        if streamed and choice.get("finish_reason") is None:
            choice["finish_reason"] = "length"
    return body


def post(stack: Stack, key: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{stack.gateway_url}{path}", json=body, headers={"authorization": f"Bearer {key}"}, timeout=120)


def chunks(stack: Stack, key: str, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    headers = {"authorization": f"Bearer {key}"}
    with httpx.stream("POST", f"{stack.gateway_url}{path}", json=body, headers=headers, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                yield json.loads(line[len("data: ") :])


def test_chat_completions_validate_whole_and_streamed(stack: Stack, plus_key: str, registry: Registry) -> None:
    base = {"model": "mini", "messages": MESSAGES, "max_tokens": 12, "temperature": 0}
    found = []
    for body in (
        base,
        {**base, "logprobs": True, "top_logprobs": 2},
        {**base, "tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        base,  # the same deterministic request again: a result-cache hit
    ):
        response = post(stack, plus_key, "/v1/chat/completions", body)
        assert response.status_code == 200, response.text
        found += violations(registry, "CreateChatCompletionResponse", response.json())
    streamed = {**base, "stream": True, "stream_options": {"include_usage": True}, "logprobs": True}
    seen = list(chunks(stack, plus_key, "/v1/chat/completions", streamed))
    assert len(seen) > 3
    for chunk in seen:
        found += violations(registry, "CreateChatCompletionStreamResponse", chunk)
    assert not found, "\n".join(found)


def test_completions_validate_whole_and_streamed(stack: Stack, plus_key: str, registry: Registry) -> None:
    found = []
    for body in (
        {"model": "mini", "prompt": "The sea is", "max_tokens": 6},
        {"model": "mini", "prompt": ["The sea is", "Trains"], "max_tokens": 1, "echo": True, "logprobs": 2},
    ):
        response = post(stack, plus_key, "/v1/completions", body)
        assert response.status_code == 200, response.text
        found += violations(
            registry, "CreateCompletionResponse", with_known_gaps_closed(response.json(), streamed=False)
        )
    streamed = {"model": "mini", "prompt": "Once", "max_tokens": 6, "stream": True, "logprobs": 1, "echo": True}
    seen = list(chunks(stack, plus_key, "/v1/completions", streamed))
    assert seen[-1]["choices"][0]["finish_reason"] == "length"  # the last chunk says how it ended
    for chunk in seen:  # OpenAI streams the whole response's shape
        found += violations(registry, "CreateCompletionResponse", with_known_gaps_closed(chunk, streamed=True))
    assert not found, "\n".join(found)


def test_responses_validate_created_streamed_and_retrieved(stack: Stack, plus_key: str, registry: Registry) -> None:
    headers = {"authorization": f"Bearer {plus_key}"}
    weather = {**TOOL["function"], "type": "function"}  # the Responses API's flat function tool
    base = {"model": "mini", "input": "Name one colour.", "max_output_tokens": 12, "temperature": 0}
    forced = {"type": "function", "name": "get_weather"}
    found: list[str] = []
    for body in (
        base,
        {**base, "include": ["message.output_text.logprobs"], "top_logprobs": 2, "instructions": "Answer briefly."},
        {**base, "tools": [weather], "tool_choice": forced, "max_output_tokens": 40},
        {**base, "text": {"format": {"type": "json_schema", "name": "colour", "schema": COLOUR_SCHEMA}}},
    ):
        created = post(stack, plus_key, "/v1/responses", body)
        assert created.status_code == 200, created.text
        found += violations(registry, "Response", created.json())
        response_id = created.json()["id"]
        retrieved = httpx.get(f"{stack.gateway_url}/v1/responses/{response_id}", headers=headers, timeout=30)
        found += violations(registry, "Response", retrieved.json())
        items = httpx.get(f"{stack.gateway_url}/v1/responses/{response_id}/input_items", headers=headers, timeout=30)
        found += violations(registry, "ResponseItemList", items.json())
        events = list(chunks(stack, plus_key, "/v1/responses", {**body, "stream": True}))
        assert events[0]["type"] == "response.created"
        assert events[-1]["type"] in ("response.completed", "response.incomplete"), events[-1]
        for event in events:
            # Validated against the event's own schema: the union's error would name only the whole event.
            found += violations(registry, RESPONSE_EVENT_SCHEMAS[event["type"]], event)
    assert not found, "\n".join(found)


COLOUR_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
    "additionalProperties": False,
}


def test_models_embeddings_moderations_and_errors_validate(stack: Stack, plus_key: str, registry: Registry) -> None:
    headers = {"authorization": f"Bearer {plus_key}"}
    models = httpx.get(f"{stack.gateway_url}/v1/models", headers=headers, timeout=30)
    found = violations(registry, "ListModelsResponse", models.json())
    cards = {card["id"]: card for card in models.json()["data"]}
    assert cards["mini"]["max_model_len"] > 0 and cards["mini"]["capabilities"]["logprobs"]
    assert cards["mini"]["capabilities"]["responses"]
    embedding = [card for card in cards.values() if card["capabilities"]["embeddings"]]
    assert embedding and all(card["dimensions"] for card in embedding)  # the embedding model is listed too
    assert [card for card in cards.values() if card["capabilities"]["moderations"]]  # and the guard
    moderation = post(stack, plus_key, "/v1/moderations", {"input": "Have a nice day."})
    found += violations(registry, "CreateModerationResponse", moderation.json())
    errors = [
        post(stack, plus_key, "/v1/chat/completions", {"model": "mini", "messages": []}),
        post(stack, plus_key, "/v1/chat/completions", {"model": "no-such-model", "messages": MESSAGES}),
        post(stack, plus_key, "/v1/completions", {"model": "mini", "prompt": "x", "suffix": "y"}),
        post(stack, plus_key, "/v1/responses", {"model": "mini", "input": "x", "reasoning": {"effort": "high"}}),
        httpx.get(f"{stack.gateway_url}/v1/models"),
    ]
    for error in errors:
        assert error.status_code >= 400
        found += violations(registry, "ErrorResponse", error.json())
    assert not found, "\n".join(found)

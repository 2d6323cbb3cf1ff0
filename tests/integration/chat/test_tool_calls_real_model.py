"""Function calling through the real gateway and real SmolLM2 workers, with the `openai` SDK as the client: the tool
result sent back and a final answer (prompt tokens include the tool definitions), `tool_choice: none`, and forced
tool calls whole and streamed (these need constrained decoding in the engine:
gpu_workers/transformers_engine/structured_decoding.py)."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import openai
import pytest

from gpu_workers.server.tool_calls import plan_for, render_messages
from shared.wire.schemas import ChatCompletionRequest
from tests.conftest import Stack

pytestmark = pytest.mark.slow

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CALLED = [
    *ASK,
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    ]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny", "temperature_c": 21}'},
]  # fmt: skip
CONSTRAINED = importlib.util.find_spec("gpu_workers.transformers_engine.structured_decoding") is not None
needs_constrained_decoding = pytest.mark.skipif(
    not CONSTRAINED, reason="forced tool choice needs the engine's constrained decoding (the structured branch)"
)


def _api(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=key, max_retries=0, timeout=300)


def _prompt_tokens(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    request = ChatCompletionRequest.model_validate({"model": "mini", "messages": messages, "tools": tools})
    rendered = render_messages(request.messages, plan_for(request))
    return len(tokenizer.apply_chat_template(rendered, add_generation_prompt=True)["input_ids"])


def test_tool_result_then_final_answer_counts_the_tools_in_the_prompt(
    stack: Stack, plus_key: str, tokenizer: Any
) -> None:
    api = _api(stack, plus_key)
    reply = api.chat.completions.create(model="mini", messages=CALLED, tools=[WEATHER], max_tokens=40, temperature=0)
    choice = reply.choices[0]
    assert choice.message.tool_calls is None and (choice.message.content or "").strip()
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == _prompt_tokens(tokenizer, CALLED, [WEATHER])
    without_tools = _prompt_tokens(tokenizer, CALLED, [])
    assert reply.usage.prompt_tokens > without_tools + 50, "the tool definitions are part of the prompt"
    chunks = list(api.chat.completions.create(model="mini", messages=CALLED, tools=[WEATHER], max_tokens=40,
                                              temperature=0, stream=True))  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == choice.message.content, "streamed and whole answers agree at temperature 0"


def test_tool_choice_none_never_calls(stack: Stack, plus_key: str) -> None:
    reply = _api(stack, plus_key).chat.completions.create(
        model="mini", messages=ASK, tools=[WEATHER], tool_choice="none", max_tokens=30, temperature=0
    )
    assert reply.choices[0].message.tool_calls is None and reply.choices[0].finish_reason in {"stop", "length"}


@needs_constrained_decoding
def test_forced_call_whole_then_result_then_answer(stack: Stack, plus_key: str) -> None:
    api = _api(stack, plus_key)
    forced = {"type": "function", "function": {"name": "get_weather"}}
    reply = api.chat.completions.create(
        model="mini", messages=ASK, tools=[WEATHER], tool_choice=forced, max_tokens=60, temperature=0
    )
    [made] = reply.choices[0].message.tool_calls or []
    assert made.function.name == "get_weather" and isinstance(json.loads(made.function.arguments)["city"], str)
    assert reply.choices[0].finish_reason == "tool_calls"
    history = [*ASK, reply.choices[0].message.model_dump(exclude_none=True)]
    history.append({"role": "tool", "tool_call_id": made.id, "content": '{"sky": "sunny"}'})
    final = api.chat.completions.create(model="mini", messages=history, tools=[WEATHER], max_tokens=40, temperature=0)
    assert (final.choices[0].message.content or "").strip()


@needs_constrained_decoding
def test_forced_call_streamed(stack: Stack, plus_key: str) -> None:
    stream = _api(stack, plus_key).chat.completions.create(
        model="mini", messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=80, temperature=0, stream=True
    )
    chunks = [c for c in stream if c.choices]
    deltas = [d for c in chunks for d in c.choices[0].delta.tool_calls or []]
    assert deltas and deltas[0].id and deltas[0].function.name == "get_weather"
    assert isinstance(json.loads("".join(d.function.arguments or "" for d in deltas))["city"], str)
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["tool_calls"]

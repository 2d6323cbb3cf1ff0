"""The worker's function calling against a scripted engine (real HTTP, the openai SDK): SmolLM2's prompt format, its
`<tool_call>` output parsed into OpenAI tool calls whole and streamed, forced choice through `json_schema`, and 400s."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import openai
import pytest

from gpu_workers.engine import EngineOutput, SamplingParams
from gpu_workers.server.app import create_worker_app
from gpu_workers.server.tool_calls import ToolPlan, ToolStreamParser, parse_output, render_messages
from shared.wire.schemas import ChatMessage
from shared.wire.tools_api import ToolDefinition
from tests.support.servers import serve
from tests.unit.workers.test_worker_server import ScriptedEngine

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


class RecordingEngine(ScriptedEngine):
    """Records the messages it rendered and the sampling params of each request."""

    max_model_len = 4096

    def __init__(self, script: str) -> None:
        super().__init__(script)
        self.rendered: list[list[dict[str, str]]] = []
        self.continued: list[bool] = []
        self.params: list[SamplingParams] = []

    def tokenize_chat(
        self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True, continue_final: bool = False
    ) -> list[int]:
        self.rendered.append(list(messages))
        self.continued.append(continue_final)
        return super().tokenize_chat(messages)

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[EngineOutput]:
        self.params.append(params)
        async for out in super().generate(request_id, prompt_ids, params):
            yield out


def _api(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)


CALL = 'Sure. <tool_call>[\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n]</tool_call>'


def test_auto_tool_call_whole_answer() -> None:
    engine = RecordingEngine(CALL)
    with serve(create_worker_app(engine)) as url:
        reply = _api(url).chat.completions.create(model="mini", messages=ASK, tools=[WEATHER])
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Sure."
    [call] = choice.message.tool_calls or []
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    system = engine.rendered[0][0]
    assert system["role"] == "system" and "<tools>" in system["content"] and '"get_weather"' in system["content"]
    assert engine.params[0].json_schema is None


def test_auto_tool_call_streamed_as_openai_deltas() -> None:
    engine = RecordingEngine(CALL)
    with serve(create_worker_app(engine)) as url:
        chunks = list(_api(url).chat.completions.create(model="mini", messages=ASK, tools=[WEATHER], stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "<tool" not in content, "text that starts a tool-call marker must never reach the client"
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert deltas[0].id and deltas[0].type == "function" and deltas[0].function.name == "get_weather"
    assert all(d.id is None and d.function.name is None for d in deltas[1:]), "id/type/name only on the first delta"
    assert json.loads("".join(d.function.arguments or "" for d in deltas)) == {"city": "Paris"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_plain_text_with_tools_is_just_content() -> None:
    with serve(create_worker_app(RecordingEngine("It is <b>sunny</b> < 30."))) as url:
        chunks = list(_api(url).chat.completions.create(model="mini", messages=ASK, tools=[WEATHER], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "It is <b>sunny</b> < 30."
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_named_tool_choice_prefills_and_constrains_to_the_parameters() -> None:
    engine = RecordingEngine('{"city": "Lyon"}}\n]</tool_call>')
    choice = {"type": "function", "function": {"name": "get_weather"}}
    with serve(create_worker_app(engine)) as url:
        reply = _api(url).chat.completions.create(model="mini", messages=ASK, tools=[WEATHER], tool_choice=choice)
    [call] = reply.choices[0].message.tool_calls or []
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city": "Lyon"}')
    assert reply.choices[0].message.content is None
    assert engine.params[0].json_schema == WEATHER["function"]["parameters"]
    assert engine.continued[0] and engine.rendered[0][-1]["content"].endswith('"arguments": ')


def test_required_constrains_to_an_array_of_calls() -> None:
    engine = RecordingEngine('[{"name": "get_weather", "arguments": {"city": "Oslo"}}]')
    with serve(create_worker_app(engine)) as url:
        reply = _api(url).chat.completions.create(
            model="mini", messages=ASK, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False
        )
    [call] = reply.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"city": "Oslo"}
    schema = engine.params[0].json_schema
    assert schema is not None and schema["type"] == "array" and schema["maxItems"] == 1


def test_tool_choice_none_never_returns_calls_nor_shows_tools() -> None:
    engine = RecordingEngine(CALL)
    with serve(create_worker_app(engine)) as url:
        reply = _api(url).chat.completions.create(model="mini", messages=ASK, tools=[WEATHER], tool_choice="none")
    assert reply.choices[0].message.tool_calls is None and reply.choices[0].message.content == CALL
    assert all("<tools>" not in m["content"] for m in engine.rendered[0])


PARIS_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}


def test_tool_turns_render_in_smollm2_format() -> None:
    messages = [
        ChatMessage(role="user", content="Weather in Paris?"),
        ChatMessage.model_validate({"role": "assistant", "content": None, "tool_calls": [PARIS_CALL]}),
        ChatMessage(role="tool", tool_call_id="call_1", content='{"sky": "sunny"}'),
    ]
    plan = ToolPlan("auto", [ToolDefinition.model_validate(WEATHER)])
    rendered = render_messages(messages, plan)
    assert [m["role"] for m in rendered] == ["system", "user", "assistant", "user"]
    expected = '<tool_call>[\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n]</tool_call>'
    assert rendered[2]["content"] == expected
    assert rendered[3]["content"] == '<tool_response>\n{"sky": "sunny"}\n</tool_response>'


def test_stream_parser_holds_back_a_possible_marker() -> None:
    parser = ToolStreamParser(ToolPlan("auto", [ToolDefinition.model_validate(WEATHER)]))
    assert parser.feed("Hi <tool") == ("Hi ", [])
    assert parser.feed("box> and <tool_c") == ("<toolbox> and ", [])  # released once it cannot be a marker
    assert parser.finish() == ("<tool_c", [])


def test_unparseable_block_stays_content() -> None:
    plan = ToolPlan("auto", [ToolDefinition.model_validate(WEATHER)])
    assert parse_output("<tool_call>[{oops]</tool_call>", plan) == ("<tool_call>[{oops]</tool_call>", [])


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{**WEATHER, "function": {**WEATHER["function"], "parameters": {"type": "objekt"}}}]},
         "tools[0].function.parameters"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
        ({"tools": [WEATHER], "messages": [*ASK, {"role": "tool", "tool_call_id": "call_x", "content": "1"}]},
         "messages[1].tool_call_id"),
    ],
)  # fmt: skip
def test_bad_tool_requests_are_400_with_param(extra: dict[str, Any], param: str) -> None:
    engine = RecordingEngine(CALL)
    with serve(create_worker_app(engine)) as url:
        response = httpx.post(
            f"{url}/v1/chat/completions", json={"model": "mini", "messages": ASK, **extra}, timeout=10
        )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert engine.params == [], "a refused request never reaches the engine"

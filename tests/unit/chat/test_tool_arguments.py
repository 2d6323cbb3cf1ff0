"""The gateway's tool-call checks: what breaks a request's tool contract, and tool definitions counted as prompt."""

from __future__ import annotations

from typing import Any

import pytest

from functions.chat.tool_arguments import find_problem
from functions.control.admission import estimate_prompt_tokens, prompt_messages, prompt_token_bound
from shared.wire.schemas import ChatCompletionRequest

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
NOTE = {"type": "function", "function": {"name": "note"}}  # no parameters: any JSON object


def request(**extra: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "mini", "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER, NOTE], **extra}
    )


def call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize(
    ("extra", "calls", "param", "words"),
    [
        ({}, [call("get_weather", '{"city": 3}')], "tools[0].function.parameters", "not of type 'string'"),
        ({}, [call("get_weather", '{"city": "Oslo"')], "tools[0].function.parameters", "not valid JSON"),
        ({}, [call("nope", "{}")], "tools", "not one of the tools"),
        ({}, [call("note", "[1]")], "tools[1].function.parameters", "not of type 'object'"),
        ({"tool_choice": "required"}, [], "tool_choice", "without calling"),
        ({"tool_choice": {"type": "function", "function": {"name": "note"}}}, [call("get_weather", '{"city": "x"}')],
         "tool_choice", "instead of 'note'"),
    ],
)  # fmt: skip
def test_problems_name_the_function_and_the_place(
    extra: dict[str, Any], calls: list[dict[str, Any]], param: str, words: str
) -> None:
    problem = find_problem(request(**extra), calls)
    assert problem is not None and problem.param == param and words in problem.message


def test_valid_calls_keep_the_contract() -> None:
    assert find_problem(request(), [call("get_weather", '{"city": "Oslo"}'), call("note", "{}")]) is None
    assert find_problem(request(), []) is None  # auto: answering in text is allowed


def test_tool_definitions_count_toward_the_prompt_estimate_and_bound() -> None:
    plain = ChatCompletionRequest.model_validate({"model": "mini", "messages": [{"role": "user", "content": "hi"}]})
    with_tools = request()
    assert estimate_prompt_tokens(prompt_messages(with_tools)) > estimate_prompt_tokens(prompt_messages(plain)) + 20
    assert prompt_token_bound(prompt_messages(with_tools)) > prompt_token_bound(plain.messages) + 100

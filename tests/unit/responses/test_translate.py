"""Responses API requests as chat requests: items as messages, tools and formats in chat's shapes, and the 400s for
what no pool here can honour (functions/responses/translate.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from functions.responses.translate import chat_messages, chat_request, refuse_unhonoured
from shared.errors import InvalidRequestError
from shared.wire.responses_api import ResponsesRequest


def request(**fields: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "mini", "input": "Hi.", **fields})


def test_text_input_is_one_user_message() -> None:
    assert chat_messages("Hello") == [{"role": "user", "content": "Hello"}]


def test_function_calls_join_the_assistant_message_before_them_and_outputs_are_tool_messages() -> None:
    items = request(
        input=[
            {
                "role": "user",
                "content": [{"type": "input_text", "text": "Weather in "}, {"type": "input_text", "text": "Oslo?"}],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
            },
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Oslo"}'},
            {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "4 C"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "noon"}]},
        ]
    ).input
    assert isinstance(items, list)
    messages = chat_messages(items)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert messages[0]["content"] == [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Oslo?"}]
    assert messages[1]["content"] == [{"type": "text", "text": "Checking."}]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["c1", "c2"]
    assert messages[3] == {"role": "tool", "tool_call_id": "c2", "content": "noon"}


def test_a_function_call_with_no_message_before_it_is_an_assistant_message_of_its_own() -> None:
    items = request(input=[{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]).input
    assert isinstance(items, list)
    assert chat_messages(items)[0] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }


def test_an_earlier_answers_reasoning_item_is_taken_back_and_kept_out_of_the_prompt() -> None:
    """A client that manages its own context sends a reasoning model's output back whole: its reasoning item is
    accepted and not rendered (reasoning models' chat templates drop earlier turns' reasoning)."""
    reasoning = {
        "type": "reasoning", "id": "rs_1", "summary": [], "status": "completed",
        "content": [{"type": "reasoning_text", "text": "Lisbon is the capital."}],
    }  # fmt: skip
    answer = {"role": "assistant", "content": [{"type": "output_text", "text": "Lisbon."}]}
    items = request(input=[{"role": "user", "content": "A city?"}, reasoning, answer]).input
    assert isinstance(items, list)
    assert [m["role"] for m in chat_messages(items)] == ["user", "assistant"]


def test_an_input_image_becomes_chats_image_url_part() -> None:
    image = {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"}
    items = request(input=[{"role": "user", "content": [{"type": "input_text", "text": "What?"}, image]}]).input
    assert isinstance(items, list)
    assert chat_messages(items)[0]["content"] == [
        {"type": "text", "text": "What?"},
        {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
    ]


@pytest.mark.parametrize(
    ("item", "param"),
    [
        (
            {"role": "user", "content": [{"type": "input_image", "file_id": "file-abc"}]},  # only image_url is taken
            "input[0].content[0].type",
        ),
        ({"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}, "input[0].content[0].type"),
        (
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [{"type": "input_image", "image_url": "https://x/y.png"}],
            },
            "input[0].output",
        ),
        ({"type": "item_reference", "id": "msg_1"}, "input[0].type"),
        ({"type": "web_search_call", "id": "ws_1", "status": "completed"}, "input[0].type"),
    ],
)
def test_content_and_items_no_pool_reads_are_refused_by_name(item: dict[str, Any], param: str) -> None:
    items = request(input=[item]).input
    assert isinstance(items, list)
    with pytest.raises(InvalidRequestError) as refused:
        chat_messages(items)
    assert refused.value.param == param


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"reasoning": {"summary": "auto"}}, "reasoning.summary"),  # vLLM returns the reasoning, never a summary
        ({"background": True}, "background"),
        ({"truncation": "auto"}, "truncation"),
        ({"service_tier": "priority"}, "service_tier"),
        ({"text": {"verbosity": "low"}}, "text.verbosity"),
        ({"include": ["code_interpreter_call.outputs"]}, "include[0]"),
        ({"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}, "tools[0].type"),
        ({"tools": [{"type": "function", "name": "f", "defer_loading": True}]}, "tools[0].defer_loading"),
        ({"previous_response_id": "resp_x", "conversation": "conv_x"}, "conversation"),
        ({"input": []}, "input"),
    ],
)
def test_what_no_pool_honours_is_a_400_naming_it(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        refuse_unhonoured(request(**fields))
    assert refused.value.param == param


def test_a_reasoning_effort_travels_as_chats_reasoning_effort() -> None:
    """Whether the pool takes it is the pipeline's to say, once the model is routed (a 400 where its model does not
    reason: tests/integration/chat/test_reasoning_pools.py)."""
    asked = request(reasoning={"effort": "high"})
    refuse_unhonoured(asked)
    assert chat_request(asked, [{"role": "user", "content": "hi"}]).reasoning_effort == "high"


def test_the_no_op_values_are_accepted() -> None:
    refuse_unhonoured(
        request(reasoning={"effort": "none"}, truncation="disabled", service_tier="auto", text={"verbosity": "medium"})
    )


def test_a_field_openai_does_not_define_is_refused_at_parse() -> None:
    with pytest.raises(ValidationError) as refused:
        request(temperature_x=1)
    assert refused.value.errors()[0]["type"] == "extra_forbidden"


def test_the_chat_request_carries_tools_format_budget_and_logprobs_in_chats_shapes() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    body = chat_request(
        request(
            tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}],
            tool_choice={"type": "function", "name": "f"},
            text={"format": {"type": "json_schema", "name": "thing", "schema": schema}},
            max_output_tokens=33,
            include=["message.output_text.logprobs"],
            top_logprobs=3,
            stream=True,
        ),
        [{"role": "user", "content": "Hi."}],
    )
    dumped = body.model_dump(exclude_none=True, by_alias=True)
    assert dumped["tools"] == [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": True}}
    ]
    assert dumped["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert dumped["response_format"] == {"type": "json_schema", "json_schema": {"name": "thing", "schema": schema}}
    assert (body.max_completion_tokens, body.logprobs, body.top_logprobs) == (33, True, 3)
    assert body.stream_options is not None and body.stream_options.include_usage


def test_a_json_schema_format_without_its_name_is_a_400() -> None:
    with pytest.raises(InvalidRequestError) as refused:
        chat_request(
            request(text={"format": {"type": "json_schema", "schema": {}}}), [{"role": "user", "content": "x"}]
        )
    assert refused.value.param == "text.format.name"

"""The Responses API's typed events made from chat stream frames (functions/responses/events.py): their order and
sequence numbers, text and function-call arguments accumulated, how the answer ended, and every event valid against
OpenAI's published schema for its type."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from referencing import Registry

from functions.responses.events import ResponseHead, response_events
from shared.wire.responses_api import ResponseRecord
from shared.wire.sse import DONE, sse_json
from tests.support.openai_contract import RESPONSE_EVENT_SCHEMAS, openai_registry, violations

RECORD = ResponseRecord(id="resp_" + "ab" * 24, created_at=1_700_000_000, model="mini")


@pytest.fixture(scope="module")
def registry() -> Registry:
    return openai_registry()


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish, **extra}]
    return sse_json({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "mini", "choices": choices})


USAGE = sse_json(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "mini",
        "choices": [],
        "usage": {
            "prompt_tokens": 7,
            "completion_tokens": 3,
            "total_tokens": 10,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
    }
)


def translate(frames: list[bytes], *, with_logprobs: bool = False, after: int = -1) -> list[dict[str, Any]]:
    head = ResponseHead(record=RECORD, stored=False, with_logprobs=with_logprobs)

    async def source() -> AsyncIterator[bytes]:
        yield b"id: 1\n" + head.frame()  # as the resumable buffer frames its events
        for number, frame in enumerate(frames, start=2):
            yield b"id: %d\n" % number + frame

    async def run() -> list[bytes]:
        return [event async for event in response_events(source(), after)]

    out = asyncio.run(run())
    assert out[-1] == DONE
    return [json.loads(e.split(b"data: ", 1)[1]) for e in out[:-1]]


def valid(registry: Registry, events: list[dict[str, Any]]) -> list[str]:
    return [v for e in events for v in violations(registry, RESPONSE_EVENT_SCHEMAS[e["type"]], e)]


def test_text_deltas_open_and_close_one_message_and_complete_with_usage(registry: Registry) -> None:
    logprob = {
        "token": "Hi",
        "logprob": -0.5,
        "bytes": [72, 105],
        "top_logprobs": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105]}],
    }
    events = translate(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hi"}, logprobs={"content": [logprob]}),
            chunk({"content": " there"}),
            chunk({}, finish="stop"),
            USAGE,
            DONE,
        ],
        with_logprobs=True,
    )
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[4]["logprobs"][0]["token"] == "Hi"
    done = events[-1]["response"]
    assert done["status"] == "completed" and done["output"][0]["content"][0]["text"] == "Hi there"
    assert done["usage"]["input_tokens_details"] == {"cached_tokens": 4, "cache_write_tokens": 3}
    assert not valid(registry, events)


def test_function_call_arguments_arrive_in_fragments_and_end_whole(registry: Registry) -> None:
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"ci'}}
    rest = {"index": 0, "function": {"arguments": 'ty":"Oslo"}'}}
    events = translate(
        [chunk({"tool_calls": [first]}), chunk({"tool_calls": [rest]}), chunk({}, finish="tool_calls"), DONE]
    )
    kinds = [e["type"] for e in events]
    assert kinds.count("response.function_call_arguments.delta") == 2
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["arguments"] == '{"city":"Oslo"}' and done["name"] == "get_weather"
    output = events[-1]["response"]["output"]
    assert [(i["type"], i["call_id"]) for i in output] == [("function_call", "call_1")]
    assert not valid(registry, events)


def test_an_answer_cut_by_its_budget_is_incomplete(registry: Registry) -> None:
    events = translate([chunk({"content": "One two"}), chunk({}, finish="length"), DONE])
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert not valid(registry, events)


def test_an_error_event_fails_the_response(registry: Registry) -> None:
    body = {"error": {"message": "No replica could finish.", "type": "server_error", "param": None, "code": "upstream"}}
    error = b"event: error\n" + sse_json(body)
    events = translate([chunk({"content": "Partial"}), error, DONE])
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "response.failed" and "error" in kinds
    assert events[-1]["response"]["output"][0]["status"] == "incomplete"
    assert events[-1]["response"]["error"]["message"] == "No replica could finish."
    assert not valid(registry, events)


def test_a_resuming_reader_gets_the_same_events_after_its_sequence_number() -> None:
    frames = [chunk({"content": "One"}), chunk({"content": " two"}), chunk({}, finish="stop"), USAGE, DONE]
    everything = translate(frames)
    resumed = translate(frames, after=4)
    assert resumed == [e for e in everything if e["sequence_number"] > 4 and e["type"] != "response.completed"] + [
        resumed[-1]
    ]
    assert resumed[-1]["response"]["output"] == everything[-1]["response"]["output"]


def test_a_stream_without_its_head_is_an_error_event() -> None:
    async def run() -> list[bytes]:
        async def chat_only() -> AsyncIterator[bytes]:
            yield chunk({"content": "x"})

        return [event async for event in response_events(chat_only())]

    (only,) = asyncio.run(run())
    assert json.loads(only.split(b"data: ", 1)[1])["type"] == "error"

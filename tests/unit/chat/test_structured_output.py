"""The response_format contract (shared/wire/output_schemas.py) and the gateway's check of answers against it
(functions/chat/structured_output.py): schema refusals with `param`, the one retry, the stream's withheld finish."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from functions.chat.structured_output import STRUCTURED_OUTPUTS, StructuredOutputError, StructuredOutputs
from shared.errors import InvalidRequestError, ServiceUnavailableError
from shared.wire.output_schemas import SCHEMA_PARAM, OutputContract
from shared.wire.schemas import ChatCompletionRequest, ResponseFormat
from shared.wire.sse import DONE

POINT = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
    "required": ["x", "y"],
    "additionalProperties": False,
}


def fmt(schema: dict[str, Any], strict: bool | None = True) -> ResponseFormat:
    return ResponseFormat.model_validate(
        {"type": "json_schema", "json_schema": {"name": "point", "schema": schema, "strict": strict}}
    )


def body(temperature: float | None = None, max_tokens: int | None = 40) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {
            "model": "mini",
            "messages": [{"role": "user", "content": "a point"}],
            "temperature": temperature,
            "max_tokens": max_tokens,
            "response_format": fmt(POINT).model_dump(),
        }
    )


def completion(text: str, finish: str = "stop") -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}]}


def counted(registry: CollectorRegistry, outcome: str, kind: str = "json_schema") -> float:
    labels = {"pool": "mini", "kind": kind, "outcome": outcome}
    return registry.get_sample_value(f"{STRUCTURED_OUTPUTS}_total", labels) or 0.0


# -- the contract -----------------------------------------------------------------------------------------------------


def test_text_is_no_contract_and_json_object_is_any_object() -> None:
    assert OutputContract.of(None) is None
    assert OutputContract.of(ResponseFormat(type="text")) is None
    contract = OutputContract.of(ResponseFormat(type="json_object"))
    assert contract is not None and contract.kind == "json_object"
    assert contract.problem('{"a": [1, 2]}') is None
    assert "does not match" in (contract.problem("[1, 2]") or "")


def test_a_schema_that_is_not_a_json_schema_is_a_400_with_param() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        OutputContract.of(fmt({"type": "objekt"}))
    assert caught.value.param == SCHEMA_PARAM
    assert "Invalid schema for response_format 'point'" in caught.value.message


def test_strict_refuses_what_the_grammar_cannot_enforce_and_non_strict_accepts_it() -> None:
    unique = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    with pytest.raises(InvalidRequestError) as caught:
        OutputContract.of(fmt(unique, strict=True))
    assert caught.value.param == SCHEMA_PARAM
    assert "uniqueItems" in caught.value.message and "strict" in caught.value.message
    contract = OutputContract.of(fmt(unique, strict=False))
    assert contract is not None
    assert contract.problem("[1, 2]") is None
    assert "non-unique" in (contract.problem("[1, 1]") or "")  # validated in full after decoding


def test_problems_name_what_is_wrong() -> None:
    contract = OutputContract.of(fmt(POINT))
    assert contract is not None
    assert contract.problem('{"x": 1, "y": 2}') is None
    assert "not valid JSON" in (contract.problem('{"x": 1, "y"') or "")
    assert "at y" in (contract.problem('{"x": 1, "y": "2"}') or "")


# -- non-streamed: validate, retry once, clear error -------------------------------------------------------------------


async def test_a_valid_answer_is_returned_as_is() -> None:
    registry = CollectorRegistry()
    contract = OutputContract.of(fmt(POINT))
    assert contract is not None

    async def retry() -> tuple[dict[str, Any], None]:
        raise AssertionError("a valid answer is not asked again")

    answer = completion('{"x": 1, "y": 2}')
    assert await StructuredOutputs(registry).settled(answer, contract, retry, "mini", body()) is answer
    assert counted(registry, "valid") == 1


async def test_an_invalid_answer_is_asked_once_more() -> None:
    registry = CollectorRegistry()
    contract = OutputContract.of(fmt(POINT, strict=False))
    assert contract is not None
    calls = []

    async def retry() -> tuple[dict[str, Any], None]:
        calls.append(1)
        return completion('{"x": 3, "y": 4}'), None

    answer = await StructuredOutputs(registry).settled(completion('{"x": 1}'), contract, retry, "mini", body())
    assert json.loads(answer["choices"][0]["message"]["content"]) == {"x": 3, "y": 4}
    assert calls == [1]
    assert counted(registry, "retried") == 1


async def test_invalid_twice_is_an_error_not_an_answer() -> None:
    registry = CollectorRegistry()
    contract = OutputContract.of(fmt(POINT, strict=False))
    assert contract is not None

    async def retry() -> tuple[dict[str, Any], None]:
        return completion('{"x": "one", "y": 2}'), None

    with pytest.raises(StructuredOutputError, match="at x"):
        await StructuredOutputs(registry).settled(completion("{}"), contract, retry, "mini", body())
    assert counted(registry, "failed") == 1


async def test_cut_by_max_tokens_is_a_400_naming_max_tokens_and_greedy_is_not_retried() -> None:
    registry = CollectorRegistry()
    contract = OutputContract.of(fmt(POINT))
    assert contract is not None

    async def retry() -> tuple[dict[str, Any], None]:
        raise AssertionError("greedy: the same cut again")

    with pytest.raises(InvalidRequestError) as caught:
        await StructuredOutputs(registry).settled(
            completion('{"x": 1', "length"), contract, retry, "mini", body(temperature=0, max_tokens=5)
        )
    assert caught.value.param == "max_tokens"
    assert caught.value.code == "structured_output_truncated"
    assert "(5 tokens)" in caught.value.message


async def test_a_retry_that_cannot_be_served_reports_the_first_answers_fault() -> None:
    contract = OutputContract.of(fmt(POINT))
    assert contract is not None

    async def retry() -> tuple[dict[str, Any], None]:
        raise ServiceUnavailableError("no replica")

    with pytest.raises(InvalidRequestError, match="token limit"):
        await StructuredOutputs(CollectorRegistry()).settled(
            completion('{"x"', "length"), contract, retry, "mini", body(temperature=0.7)
        )


# -- streamed: the finish is withheld from an invalid answer ----------------------------------------------------------


def chunk(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {"content": content} if content is not None else {}
    event = {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(event).encode() + b"\n\n"


class Upstream:
    def __init__(self, events: list[bytes]) -> None:
        self.events, self.closed = events, False

    async def run(self) -> AsyncGenerator[bytes, None]:
        try:
            for event in self.events:
                yield event
        finally:
            self.closed = True


async def relayed(events: list[bytes], registry: CollectorRegistry) -> tuple[list[bytes], Upstream]:
    contract = OutputContract.of(fmt(POINT))
    upstream = Upstream(events)
    checked = StructuredOutputs(registry).checked(upstream.run(), body(), contract, "mini")
    return [event async for event in checked], upstream


async def test_a_valid_stream_passes_unchanged() -> None:
    registry = CollectorRegistry()
    events = [chunk(""), chunk('{"x": 1, '), chunk('"y": 2}'), chunk(finish="stop"), DONE]
    out, _ = await relayed(events, registry)
    assert out == events
    assert counted(registry, "valid") == 1


async def test_an_invalid_stream_ends_with_an_error_event_instead_of_its_finish() -> None:
    registry = CollectorRegistry()
    events = [chunk(""), chunk('{"x": 1'), chunk(", ", finish="length"), DONE]
    out, upstream = await relayed(events, registry)
    assert out[:2] == events[:2]
    assert out[2].startswith(b"event: error\n")
    error = json.loads(out[2].split(b"data: ", 1)[1])["error"]
    assert error["param"] == "max_tokens" and "token limit" in error["message"]
    assert out[3:] == [DONE]
    assert not any(b'"finish_reason": "length"' in e for e in out)
    assert upstream.closed
    assert counted(registry, "failed") == 1


async def test_without_a_contract_the_stream_is_not_touched() -> None:
    upstream = Upstream([chunk("hi"), DONE])
    events = upstream.run()
    assert StructuredOutputs(CollectorRegistry()).checked(events, body(), None, "mini") is events

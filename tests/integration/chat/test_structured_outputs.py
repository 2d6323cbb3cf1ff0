"""Structured outputs end to end: the `openai` SDK against the real gateway and real SmolLM2 workers, whose engine
constrains decoding with llguidance masks (docs/structured-outputs.md)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest
from pydantic import BaseModel

from functions.chat.structured_output import STRUCTURED_OUTPUTS
from tests.conftest import Stack
from tests.support.prom import labelled

pytestmark = pytest.mark.slow

PET = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "species": {"enum": ["cat", "dog", "rabbit"]},
        "age_years": {"type": "integer", "minimum": 0, "maximum": 30},
    },
    "required": ["name", "species", "age_years"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Describe my pet as JSON: its name, its species and its age in years."}]


class Pet(BaseModel):
    name: str
    species: str
    age_years: int


def client(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=key, max_retries=0, timeout=300)


def json_schema_format(schema: dict[str, Any], strict: bool = True) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "pet", "schema": schema, "strict": strict}}


def count(stack: Stack, kind: str, outcome: str) -> float:
    name = f"{STRUCTURED_OUTPUTS}_total"
    return labelled(stack.gateway_url, name, pool="mini", kind=kind, outcome=outcome)


def test_json_schema_strict_non_streamed_validates(stack: Stack, plus_key: str) -> None:
    before = count(stack, "json_schema", "valid")
    reply = client(stack, plus_key).chat.completions.create(
        model="mini", messages=ASK, max_tokens=120, temperature=0, response_format=json_schema_format(PET)
    )
    assert reply.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(reply.choices[0].message.content or ""), PET)
    assert count(stack, "json_schema", "valid") == before + 1


def test_json_object_streamed_is_one_json_object(stack: Stack, plus_key: str) -> None:
    stream = client(stack, plus_key).chat.completions.create(
        model="mini",
        messages=ASK,
        max_tokens=160,
        temperature=0,
        stream=True,
        response_format={"type": "json_object"},
    )
    parts, finish = [], None
    for chunk in stream:
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert finish == "stop"
    assert isinstance(json.loads("".join(parts)), dict)


def test_json_schema_streamed_validates(stack: Stack, plus_key: str) -> None:
    stream = client(stack, plus_key).chat.completions.create(
        model="flagship",
        messages=ASK,
        max_tokens=120,
        temperature=0.7,
        stream=True,
        response_format=json_schema_format(PET),
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), PET)


def test_the_sdks_parse_helper_gets_a_parsed_pydantic_object(stack: Stack, plus_key: str) -> None:
    reply = client(stack, plus_key).chat.completions.parse(
        model="mini", messages=ASK, max_tokens=120, temperature=0, response_format=Pet
    )
    parsed = reply.choices[0].message.parsed
    assert isinstance(parsed, Pet)
    assert parsed == Pet.model_validate_json(reply.choices[0].message.content or "")


def test_a_bad_schema_is_a_400_with_param(stack: Stack, plus_key: str) -> None:
    for schema, words in (
        ({"type": "objekt"}, "Invalid schema"),
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems"),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            client(stack, plus_key).chat.completions.create(
                model="mini", messages=ASK, max_tokens=20, response_format=json_schema_format(schema)
            )
        error = caught.value.body
        assert isinstance(error, dict)
        assert error["param"] == "response_format.json_schema.schema"
        assert words in error["message"]


def test_max_tokens_too_small_is_a_clear_error_not_truncated_json(stack: Stack, plus_key: str) -> None:
    before = count(stack, "json_schema", "failed")
    with pytest.raises(openai.BadRequestError) as caught:
        client(stack, plus_key).chat.completions.create(
            model="mini", messages=ASK, max_tokens=4, temperature=0, response_format=json_schema_format(PET)
        )
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == "max_tokens" and error["code"] == "structured_output_truncated"
    assert count(stack, "json_schema", "failed") == before + 1


def test_max_tokens_too_small_streamed_ends_with_an_error_event(stack: Stack, plus_key: str) -> None:
    stream = client(stack, plus_key).chat.completions.create(
        model="mini",
        messages=ASK,
        max_tokens=4,
        temperature=0,
        stream=True,
        response_format=json_schema_format(PET),
    )
    parts, finishes = [], []
    with pytest.raises(openai.APIError, match="token limit"):
        for chunk in stream:
            for choice in chunk.choices:
                parts.append(choice.delta.content or "")
                finishes.append(choice.finish_reason)
    assert not any(finishes), "an incomplete answer never gets a finish reason"
    with pytest.raises(ValueError):
        json.loads("".join(parts))

"""The worker maps `response_format` to the engine's `SamplingParams.json_schema` (gpu_workers/server/chat_serving.py),
and refuses a bad schema with a 400 before the engine sees the request."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_workers.server.chat_serving import ChatServing
from gpu_workers.server.metrics import WorkerMetrics
from shared.errors import InvalidRequestError
from shared.wire.output_schemas import JSON_OBJECT_SCHEMA, SCHEMA_PARAM
from shared.wire.schemas import ChatCompletionRequest
from tests.unit.workers.test_worker_server import ScriptedEngine

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def prepared_schema(**fields: Any) -> dict[str, Any] | None:
    engine = ScriptedEngine("{}")
    serving = ChatServing(engine, WorkerMetrics(engine))
    body = {"model": "mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **fields}
    return serving.prepare(ChatCompletionRequest.model_validate(body)).params.json_schema


def test_each_response_format_sets_the_engines_schema() -> None:
    assert prepared_schema() is None
    assert prepared_schema(response_format={"type": "text"}) is None
    assert prepared_schema(response_format={"type": "json_object"}) == JSON_OBJECT_SCHEMA
    spec = {"name": "ok", "schema": SCHEMA, "strict": True}
    assert prepared_schema(response_format={"type": "json_schema", "json_schema": spec}) == SCHEMA


def test_a_continuation_is_not_constrained() -> None:
    """The other replica's half answer is in the prompt: a grammar started afresh would force a second value."""
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": '{"ok": '}]
    schema = prepared_schema(
        messages=messages,
        continue_final_message=True,
        add_generation_prompt=False,
        response_format={"type": "json_object"},
    )
    assert schema is None


def test_an_unenforceable_strict_schema_is_a_400_at_the_worker() -> None:
    spec = {"name": "ids", "schema": {"type": "array", "uniqueItems": True}, "strict": True}
    with pytest.raises(InvalidRequestError) as caught:
        prepared_schema(response_format={"type": "json_schema", "json_schema": spec})
    assert caught.value.param == SCHEMA_PARAM

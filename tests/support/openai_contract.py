"""OpenAI's published response schemas (tests/contracts/openai_schemas.json) as a validator for real bodies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

CONTRACT = Path(__file__).parents[1] / "contracts" / "openai_schemas.json"


def nullable_as_meant(node: Any) -> Any:
    """OpenAPI 3.0's `nullable: true` as JSON Schema: the schema or null."""
    if isinstance(node, list):
        return [nullable_as_meant(item) for item in node]
    if not isinstance(node, dict):
        return node
    inner = {key: nullable_as_meant(value) for key, value in node.items() if key != "nullable"}
    return {"anyOf": [inner, {"type": "null"}]} if node.get("nullable") is True else inner


def openai_registry() -> Registry:
    document = nullable_as_meant(json.loads(CONTRACT.read_text(encoding="utf-8")))
    return Registry().with_resource("urn:openai", Resource.from_contents(document, DRAFT202012))


def violations(registry: Registry, schema: str, body: Any) -> list[str]:
    validator = Draft202012Validator({"$ref": f"urn:openai#/components/schemas/{schema}"}, registry=registry)
    return [
        f"{schema} at {'/'.join(map(str, error.absolute_path))}: {error.message[:200]}"
        for error in validator.iter_errors(body)
    ]


# Each Responses API stream event type and its schema (a union's error names only the whole event).
RESPONSE_EVENT_SCHEMAS = {
    "response.created": "ResponseCreatedEvent",
    "response.in_progress": "ResponseInProgressEvent",
    "response.output_item.added": "ResponseOutputItemAddedEvent",
    "response.content_part.added": "ResponseContentPartAddedEvent",
    "response.output_text.delta": "ResponseTextDeltaEvent",
    "response.output_text.done": "ResponseTextDoneEvent",
    "response.content_part.done": "ResponseContentPartDoneEvent",
    "response.output_item.done": "ResponseOutputItemDoneEvent",
    "response.function_call_arguments.delta": "ResponseFunctionCallArgumentsDeltaEvent",
    "response.function_call_arguments.done": "ResponseFunctionCallArgumentsDoneEvent",
    "response.reasoning_text.delta": "ResponseReasoningTextDeltaEvent",
    "response.reasoning_text.done": "ResponseReasoningTextDoneEvent",
    "response.completed": "ResponseCompletedEvent",
    "response.incomplete": "ResponseIncompleteEvent",
    "response.failed": "ResponseFailedEvent",
    "error": "ResponseErrorEvent",
}

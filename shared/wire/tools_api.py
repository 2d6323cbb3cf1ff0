"""Function calling on the wire (OpenAI's shapes, as vLLM serves them): tool definitions, `tool_choice`, the tool calls
of a message and of a stream delta, and the request checks both the gateway and the local worker run.

A malformed tool definition is a 400 with `param` naming the place (`tools[0].function.parameters`), never a tool the
model silently does not see. `parameters` must be a valid JSON Schema: checked against its meta-schema with
`jsonschema` (the draft it declares with `$schema`, else 2020-12), as OpenAI and vLLM refuse a broken one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for
from pydantic import BaseModel, ConfigDict, Field

from shared.errors import InvalidRequestError

# OpenAI's rule for function names.
FUNCTION_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TOOLS = 128  # OpenAI's limit


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    """`{"type": "function", "function": {"name": ...}}`: the model must call this function."""

    type: Literal["function"]
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class FunctionCall(BaseModel):
    name: str
    arguments: str  # JSON text, as the model wrote it


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class FunctionCallDelta(BaseModel):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(BaseModel):
    """One fragment of a streamed tool call: `id`, `type` and `name` on a call's first delta only, then `arguments`
    in fragments (OpenAI's stream shape)."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta = Field(default_factory=FunctionCallDelta)


def check_tool_request(
    tools: list[ToolDefinition] | None,
    tool_choice: ToolChoice | None,
    parallel_tool_calls: bool | None,
    messages: list[Any],
    gateway_tools: Sequence[str] = (),
) -> None:
    """Refuse (400, with `param`) what no model could honour: a broken tool schema, duplicate names, a tool_choice
    naming an unknown function or given without tools, a tool message answering no earlier tool call.
    `gateway_tools`: the server tools the gateway adds itself (functions/chat/server_tools/); `tool_choice` may name
    one."""
    names: list[str] = []
    if tools is not None and len(tools) > MAX_TOOLS:
        raise InvalidRequestError(f"At most {MAX_TOOLS} tools are allowed.", param="tools")
    for i, tool in enumerate(tools or []):
        fn = tool.function
        if not FUNCTION_NAME_RE.fullmatch(fn.name):
            raise InvalidRequestError(
                f"Invalid function name '{fn.name[:80]}': use a-z, A-Z, 0-9, underscores and dashes, at most 64.",
                param=f"tools[{i}].function.name",
            )
        if fn.name in names:
            raise InvalidRequestError(f"Duplicate function name '{fn.name}'.", param=f"tools[{i}].function.name")
        names.append(fn.name)
        if fn.parameters is not None:
            check_json_schema(fn.parameters, f"tools[{i}].function.parameters")
    if tool_choice is not None and tool_choice != "none" and not (tools or gateway_tools):
        raise InvalidRequestError("tool_choice is only allowed when tools are specified.", param="tool_choice")
    if isinstance(tool_choice, NamedToolChoice) and tool_choice.function.name not in [*names, *gateway_tools]:
        raise InvalidRequestError(
            f"tool_choice names the function '{tool_choice.function.name}', which is not in tools.",
            param="tool_choice",
        )
    if parallel_tool_calls is not None and not (tools or gateway_tools):
        raise InvalidRequestError("parallel_tool_calls is only allowed when tools are specified.", param="tools")
    _check_tool_turns(messages)


def check_json_schema(schema: dict[str, Any], param: str) -> None:
    """A 400 naming `param` unless `schema` is a valid JSON Schema (by the draft it declares, else 2020-12)."""
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        at = f" at '{where}'" if where else ""
        raise InvalidRequestError(f"Invalid JSON schema{at}: {exc.message}", param=param) from exc


def _check_tool_turns(messages: list[Any]) -> None:
    """Every tool message answers a call of the assistant message before it (OpenAI refuses the rest)."""
    open_ids: set[str] = set()
    for i, message in enumerate(messages):
        if message.role == "assistant":
            open_ids = {call.id for call in message.tool_calls or []}
        elif message.role == "tool":
            if not message.tool_call_id:
                raise InvalidRequestError(
                    "A message with role 'tool' needs tool_call_id.", param=f"messages[{i}].tool_call_id"
                )
            if message.tool_call_id not in open_ids:
                raise InvalidRequestError(
                    "Messages with role 'tool' must be a response to a preceding message with 'tool_calls' "
                    f"(no call with id '{message.tool_call_id[:80]}').",
                    param=f"messages[{i}].tool_call_id",
                )
        elif message.tool_calls or message.tool_call_id:
            field = "tool_calls" if message.tool_calls else "tool_call_id"
            raise InvalidRequestError(
                f"Only assistant messages carry tool_calls and only tool messages tool_call_id ({message.role}).",
                param=f"messages[{i}].{field}",
            )
        else:
            open_ids = set()

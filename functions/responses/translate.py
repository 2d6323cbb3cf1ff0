"""A Responses API request as the chat-completions request the chat pipeline runs: input items as messages,
`instructions` as the leading system message, function tools and `text.format` in chat's shapes; and the 400s for
what no pool here can honour (docs/responses.md)."""

from __future__ import annotations

from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from shared.errors import InvalidRequestError
from shared.wire.http_errors import validation_to_error
from shared.wire.responses_api import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionChoice,
    FunctionTool,
    HostedChoice,
    InputItem,
    MessageItem,
    ReasoningItem,
    RefusalPart,
    ResponsesRequest,
    UnsupportedItem,
    UnsupportedPart,
    UnsupportedTool,
)
from shared.wire.schemas import ChatCompletionRequest

LOGPROBS_INCLUDE = "message.output_text.logprobs"
RESULTS_INCLUDE = "file_search_call.results"
HONOURED_INCLUDES = frozenset({LOGPROBS_INCLUDE, RESULTS_INCLUDE})


def refuse_unhonoured(request: ResponsesRequest) -> None:
    """A 400 naming the first field set to something no pool here can do; nothing is reserved or stored before it."""
    # `reasoning.effort` is checked against the pool the request routes to (a model that reasons takes it: the chat
    # pipeline's `admitted` step); a summary is not: vLLM hands out the reasoning text itself, never a summary of it.
    reasoning = request.reasoning
    if reasoning is not None and (reasoning.summary or reasoning.generate_summary):
        raise InvalidRequestError(
            "Reasoning summaries are not offered: a model that reasons here returns its reasoning text itself, as the "
            "reasoning item's content.",
            param="reasoning.summary",
        )
    refused: list[tuple[str, bool, str]] = [
        ("background", bool(request.background), "Background responses are not offered; stream the response instead."),
        ("prompt", request.prompt is not None, "Stored prompt templates are not offered; send `input` itself."),
        ("moderation", request.moderation is not None, "Per-request moderation settings are not offered."),
        ("context_management", request.context_management is not None, "Context management is not offered yet."),
        ("prompt_cache_options", request.prompt_cache_options is not None, "Prompt cache options are not offered."),
        (
            "truncation",
            request.truncation == "auto",
            "truncation 'auto' is not offered yet: a request whose input exceeds the model's context is a 400.",
        ),
        (
            "prompt_cache_retention",
            request.prompt_cache_retention == "24h",
            "Extended prompt-cache retention is not offered: the prefix cache lives in the replica's memory.",
        ),
        (
            "service_tier",
            request.service_tier in ("flex", "scale", "priority"),
            "Service tiers come from the account's plan here; only 'auto' and 'default' are accepted.",
        ),
        (
            "text.verbosity",
            request.text is not None and request.text.verbosity not in (None, "medium"),
            "'text.verbosity' needs a model that honours it; only 'medium' is accepted here.",
        ),
        (
            "conversation",
            request.conversation is not None and request.previous_response_id is not None,
            "'conversation' and 'previous_response_id' cannot be used together.",
        ),
        (
            "store",
            request.conversation is not None and not request.store,
            "A response in a conversation is stored with it: 'store' must be true.",
        ),
    ]
    for param, refused_here, message in refused:
        if refused_here:
            raise InvalidRequestError(message, param=param, code="unsupported_parameter")
    for index, name in enumerate(request.include or []):
        if name not in HONOURED_INCLUDES:
            raise InvalidRequestError(
                f"include value '{name[:80]}' is not supported; supported: {', '.join(sorted(HONOURED_INCLUDES))}.",
                param=f"include[{index}]",
                code="unsupported_parameter",
            )
    for index, tool in enumerate(request.tools or []):
        if isinstance(tool, UnsupportedTool):
            raise InvalidRequestError(
                f"Tools of type '{tool.type[:40]}' are not supported; supported: function, file_search.",
                param=f"tools[{index}].type",
                code="unsupported_parameter",
            )
        if isinstance(tool, FunctionTool):
            for field in ("output_schema", "defer_loading", "allowed_callers"):
                if getattr(tool, field) not in (None, False, []):
                    raise InvalidRequestError(
                        f"'{field}' on function tools is not supported here.",
                        param=f"tools[{index}].{field}",
                        code="unsupported_parameter",
                    )
    if request.input is None or request.input == [] or request.input == "":
        raise InvalidRequestError(
            "Missing required parameter: 'input'.", param="input", code="missing_required_parameter"
        )


def _text_of(content: Any, param: str) -> str | list[dict[str, Any]]:
    """A message's content in chat's shape: a string stays one, parts become text parts (refusals included) and an
    `input_image` with an `image_url` becomes chat's `image_url` part (the chat pipeline checks it and whether the
    model sees)."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        if isinstance(part, UnsupportedPart):
            parts.append(_image_part(part, f"{param}[{index}]"))
            continue
        parts.append({"type": "text", "text": part.refusal if isinstance(part, RefusalPart) else part.text})
    return parts


def _image_part(part: UnsupportedPart, param: str) -> dict[str, Any]:
    fields = part.model_extra or {}
    url, detail = fields.get("image_url"), fields.get("detail")
    if part.type != "input_image" or not isinstance(url, str) or detail not in (None, "auto", "low", "high"):
        why = "an `input_image` is taken with an `image_url` (an https URL or a data URI)"
        if part.type != "input_image":
            why = "the models here read text and images"
        raise InvalidRequestError(
            f"Content of type '{part.type[:40]}' is not supported: {why}.",
            param=f"{param}.type",
            code="unsupported_parameter",
        )
    return {"type": "image_url", "image_url": {"url": url, **({"detail": detail} if detail else {})}}


def chat_messages(items: str | list[InputItem], param: str = "input") -> list[dict[str, Any]]:
    """Input items as chat messages, in order: function calls join the assistant message before them (one message,
    several calls, as a chat model wrote them); a function's output is a `tool` message."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if isinstance(item, MessageItem):
            messages.append({"role": item.role, "content": _text_of(item.content, f"{param}[{index}].content")})
        elif isinstance(item, FunctionCallItem):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif isinstance(item, FunctionCallOutputItem):
            output = _text_of(item.output, f"{param}[{index}].output")
            if not isinstance(output, str) and any(part["type"] != "text" for part in output):
                raise InvalidRequestError(
                    "A function call's output is text: images are taken in user messages.",
                    param=f"{param}[{index}].output",
                    code="unsupported_parameter",
                )
            text = output if isinstance(output, str) else "".join(part["text"] for part in output)
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": text})
        elif isinstance(item, ReasoningItem):
            continue  # an earlier answer's reasoning: never rendered (reasoning models' templates drop it)
        elif isinstance(item, UnsupportedItem):
            raise InvalidRequestError(
                f"Input items of type '{item.type[:40]}' are not supported here; send messages, function calls and "
                "function call outputs (an earlier response's items come with previous_response_id).",
                param=f"{param}[{index}].type",
                code="unsupported_parameter",
            )
    return messages


def _chat_tools(request: ResponsesRequest) -> list[dict[str, Any]] | None:
    if not request.tools:
        return None
    tools: list[dict[str, Any]] = []
    for tool in request.tools:
        if isinstance(tool, FunctionTool):
            function = tool.model_dump(include={"name", "description", "parameters", "strict"}, exclude_none=True)
            tools.append({"type": "function", "function": function})
        else:  # file_search: the chat request lifts it out; the gateway runs the search (functions/retrieval)
            tools.append(tool.model_dump(exclude_none=True))
    return tools


def _chat_tool_choice(request: ResponsesRequest) -> str | dict[str, Any] | None:
    choice = request.tool_choice
    if isinstance(choice, FunctionChoice):
        return {"type": "function", "function": {"name": choice.name}}
    if isinstance(choice, HostedChoice):
        return {"type": choice.type}
    return choice


def _response_format(request: ResponsesRequest) -> dict[str, Any] | None:
    form = request.text.format if request.text is not None else None
    if form is None or form.type == "text":
        return None
    if form.type == "json_object":
        return {"type": "json_object"}
    if not form.name:
        raise InvalidRequestError(
            "Missing required parameter: 'text.format.name'.",
            param="text.format.name",
            code="missing_required_parameter",
        )
    if form.schema_ is None:
        raise InvalidRequestError(
            "Missing required parameter: 'text.format.schema'.",
            param="text.format.schema",
            code="missing_required_parameter",
        )
    schema = {"name": form.name, "schema": form.schema_, "description": form.description, "strict": form.strict}
    return {"type": "json_schema", "json_schema": {k: v for k, v in schema.items() if v is not None}}


def chat_request(request: ResponsesRequest, messages: list[dict[str, Any]]) -> ChatCompletionRequest:
    """The chat-completions request for `messages` (the rendered context: history, instructions, the new input)
    with the request's sampling, tools, output format and hints."""
    logprobs = LOGPROBS_INCLUDE in (request.include or [])
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "stream": request.stream,
        "stream_options": {"include_usage": True} if request.stream else None,
        "tools": _chat_tools(request),
        "tool_choice": _chat_tool_choice(request),
        "parallel_tool_calls": request.parallel_tool_calls,
        "response_format": _response_format(request),
        "max_completion_tokens": request.max_output_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "logprobs": True if logprobs else None,
        "top_logprobs": (request.top_logprobs or 0) if logprobs else None,
        "user": request.user,
        "safety_identifier": request.safety_identifier,
        "prompt_cache_key": request.prompt_cache_key,
        "reasoning_effort": request.reasoning.effort if request.reasoning is not None else None,
    }
    try:
        return ChatCompletionRequest.model_validate({k: v for k, v in body.items() if v is not None})
    except ValidationError as exc:
        raise validation_to_error(RequestValidationError(exc.errors())) from exc

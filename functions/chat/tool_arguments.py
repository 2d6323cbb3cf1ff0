"""The gateway's side of function calling: refuse malformed tool requests (400 with `param`), validate every tool call
the model makes against its function's JSON schema (`jsonschema`), give the model one repair attempt, else a clear
error (docs/tools.md).

A whole answer is checked before the client sees it. A stream's tool-call deltas are held until the answer finishes
and its calls are valid, then released as the worker sent them (text content passes through at once). The repair is
one non-streamed upstream call: the conversation plus a user message naming the function and the schema error; its
tokens are billed with the answer's. If the repaired answer still fails: `ToolArgumentsError` (422), as the JSON
error body or as an in-band SSE `error` event before `[DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for
from prometheus_client import CollectorRegistry, Counter

from shared.errors import FleetchatError
from shared.wire.schemas import ChatCompletionRequest, ChatMessage
from shared.wire.sse import DONE, sse_error
from shared.wire.tools_api import NamedToolChoice, check_tool_request

TOOL_CALLS_METRIC = "fleetchat_gateway_tool_calls"  # exposed as ..._total{pool,outcome}

# One upstream call, non-streamed: the whole completion body.
Repair = Callable[[ChatCompletionRequest], Awaitable[dict[str, Any]]]


class ToolArgumentsError(FleetchatError):
    """The model's tool call still failed its function's schema after the repair attempt. 422: the request was valid
    and was processed, but no valid call came out of it (the SDK does not retry a 422; a retry at temperature 0 would
    give the same answer)."""

    status_code = 422
    error_type = "server_error"
    default_code = "invalid_tool_call"


@dataclass(frozen=True)
class Problem:
    message: str
    param: str


def check_request(request: ChatCompletionRequest, server_tools: Sequence[str] = ()) -> None:
    """400 (with `param`) for a malformed tool request; nothing has been charged or changed yet. `server_tools`: the
    gateway's own tools the request asked for (their definitions are added later; `tool_choice` may name one)."""
    check_tool_request(request.tools, request.tool_choice, request.parallel_tool_calls, request.messages, server_tools)


def client_contract(request: ChatCompletionRequest, server_tools: Sequence[str] = ()) -> ChatCompletionRequest:
    """The request whose `tool_choice` the answer the client gets must keep. With server tools the gateway's rounds
    honour a `tool_choice` that requires a call (`required`, or naming a server tool) and then withdraw the tools
    (functions/chat/server_tools/loop.py), so the final answer may rightly be text."""
    choice = request.tool_choice
    if server_tools and (
        choice == "required" or (isinstance(choice, NamedToolChoice) and choice.function.name in server_tools)
    ):
        return request.model_copy(update={"tool_choice": "auto"})
    return request


def _forced(request: ChatCompletionRequest) -> bool:
    return request.tool_choice == "required" or isinstance(request.tool_choice, NamedToolChoice)


def expects_calls(request: ChatCompletionRequest) -> bool:
    return bool(request.tools) and request.tool_choice != "none"


def find_problem(request: ChatCompletionRequest, calls: list[dict[str, Any]]) -> Problem | None:
    """The first way the answer's tool calls break the request's contract, or None when they keep it."""
    tools = {t.function.name: (i, t.function.parameters) for i, t in enumerate(request.tools or [])}
    if request.tool_choice == "none" and calls:
        return Problem("The model called a function although tool_choice is 'none'.", "tool_choice")
    if _forced(request) and not calls:
        return Problem("The model answered without calling a function, which tool_choice requires.", "tool_choice")
    for call in calls:
        fn = call.get("function") or {}
        name = str(fn.get("name"))
        if name not in tools:
            return Problem(f"The model called '{name[:80]}', which is not one of the tools.", "tools")
        index, schema = tools[name]
        choice = request.tool_choice
        if isinstance(choice, NamedToolChoice) and name != choice.function.name:
            return Problem(f"The model called '{name}' instead of '{choice.function.name}'.", "tool_choice")
        param = f"tools[{index}].function.parameters"
        try:
            arguments = json.loads(fn.get("arguments") or "")
        except ValueError as exc:
            return Problem(f"The arguments of the call to '{name}' are not valid JSON ({exc}).", param)
        schema = schema or {"type": "object"}
        validator = validator_for(schema, default=jsonschema.Draft202012Validator)(schema)
        error = best_match(validator.iter_errors(arguments))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            return Problem(f"The arguments of the call to '{name}' fail its schema at {where}: {error.message}", param)
    return None


def repair_request(request: ChatCompletionRequest, problem: Problem) -> ChatCompletionRequest:
    """The request again, non-streamed, with a user message that says what was wrong."""
    schemas = {t.function.name: t.function.parameters for t in request.tools or []}
    note = (
        f"Your previous reply was not a valid tool call: {problem.message} Reply again with a tool call whose "
        f"arguments satisfy the function's JSON schema. Schemas: {json.dumps(schemas, ensure_ascii=False)}"
    )
    messages = [*request.messages, ChatMessage(role="user", content=note)]
    return request.model_copy(update={"messages": messages, "stream": False, "stream_options": None})


def _calls_of(completion: dict[str, Any]) -> list[dict[str, Any]]:
    choices = completion.get("choices") or [{}]
    return list((choices[0].get("message") or {}).get("tool_calls") or [])


def _merged_usage(first: dict[str, Any] | None, second: dict[str, Any] | None) -> dict[str, Any] | None:
    if not first or not second:
        return second or first
    total = {k: int(first.get(k) or 0) + int(second.get(k) or 0) for k in ("prompt_tokens", "completion_tokens")}
    return {**second, **total, "total_tokens": total["prompt_tokens"] + total["completion_tokens"]}


class ToolArguments:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter(
            TOOL_CALLS_METRIC,
            "Answers carrying tool calls, by how their arguments fared: valid, repaired (valid after the one repair "
            "attempt), invalid (refused with a 422).",
            ["pool", "outcome"],
            registry=registry,
        )

    async def check_completion(
        self, pool: str, request: ChatCompletionRequest, completion: dict[str, Any], repair: Repair
    ) -> dict[str, Any]:
        """The completion, or its repaired replacement (usage of both), or ToolArgumentsError."""
        calls = _calls_of(completion)
        if not calls and not _forced(request):
            return completion
        problem = find_problem(request, calls)
        if problem is None:
            self.calls.labels(pool, "valid").inc()
            return completion
        repaired = await repair(repair_request(request, problem))
        again = find_problem(request, _calls_of(repaired))
        if again is not None:
            self.calls.labels(pool, "invalid").inc()
            raise ToolArgumentsError(f"{again.message} (after one repair attempt)", param=again.param)
        self.calls.labels(pool, "repaired").inc()
        return {**repaired, "id": completion.get("id", repaired.get("id")),
                "usage": _merged_usage(completion.get("usage"), repaired.get("usage"))}  # fmt: skip

    async def held(
        self, pool: str, request: ChatCompletionRequest, events: AsyncIterator[bytes], repair: Repair
    ) -> AsyncGenerator[bytes, None]:
        """A worker stream with its tool-call deltas held until the answer ends and its calls are valid."""
        stream = _HeldStream(self, pool, request, repair)
        async for event in events:
            for out in await stream.on(event):
                yield out


def _data(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def _fragments(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Whole calls as OpenAI stream fragments: id, type and name first, then the arguments."""
    out: list[dict[str, Any]] = []
    for i, call in enumerate(calls):
        fn = call.get("function") or {}
        name = {"name": fn.get("name"), "arguments": ""}
        out += [
            {"index": i, "id": call.get("id"), "type": "function", "function": name},
            {"index": i, "function": {"arguments": fn.get("arguments") or ""}},
        ]
    return out


class _HeldStream:
    def __init__(self, owner: ToolArguments, pool: str, request: ChatCompletionRequest, repair: Repair) -> None:
        self.owner, self.pool, self.request, self.repair = owner, pool, request, repair
        self.fragments: list[dict[str, Any]] = []  # as the worker sent them
        self.calls: dict[int, dict[str, Any]] = {}  # assembled by index
        self.extra_usage: dict[str, Any] | None = None  # the repair call's tokens, added to every later usage
        self.failed = False
        self._error: FleetchatError = ToolArgumentsError("The model's tool call was not valid.")

    async def on(self, event: bytes) -> list[bytes]:
        if event == DONE:
            return [event]
        if self.failed or not event.startswith(b"data: {"):
            return [] if self.failed else [event]
        chunk = json.loads(event[len(b"data: ") :])
        if self.extra_usage is not None and isinstance(chunk.get("usage"), dict):
            chunk["usage"] = _merged_usage(chunk["usage"], self.extra_usage)
        choices = chunk.get("choices") or []
        if not choices:
            return [_data(chunk)]
        choice = choices[0]
        delta = choice.get("delta") or {}
        for fragment in delta.pop("tool_calls", None) or []:
            self._collect(fragment)
        finish = choice.get("finish_reason")
        out: list[bytes] = []
        if finish is not None and (self.calls or _forced(self.request)):
            released = await self._release(chunk)
            if released is None:
                return [sse_error(self._error)]
            out.extend(released)
            choice["finish_reason"] = "tool_calls" if finish in ("stop", "tool_calls") else finish
        if any(v not in (None, "") for v in delta.values()) or choice.get("finish_reason") or "role" in delta:
            out.append(_data(chunk))
        return out

    def _collect(self, fragment: dict[str, Any]) -> None:
        index = int(fragment.get("index") or 0)
        fn = fragment.get("function") or {}
        if fragment.get("id") and index in self.calls:  # a continuation leg restarted this call: start it over
            self.fragments = [f for f in self.fragments if int(f.get("index") or 0) != index]
            del self.calls[index]
        call = self.calls.setdefault(index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        call["id"] = fragment.get("id") or call["id"]
        call["function"]["name"] += fn.get("name") or ""
        call["function"]["arguments"] += fn.get("arguments") or ""
        self.fragments.append(fragment)

    async def _release(self, chunk: dict[str, Any]) -> list[bytes] | None:
        """Chunks carrying the (valid or repaired) calls, one fragment each, or None after a failed repair."""
        calls = [self.calls[i] for i in sorted(self.calls)]
        problem = find_problem(self.request, calls)
        fragments = self.fragments
        if problem is not None:
            try:
                repaired = await self.repair(repair_request(self.request, problem))
            except FleetchatError as exc:  # the repair call itself failed (no replica, a refusal): said in-band
                self.owner.calls.labels(self.pool, "invalid").inc()
                self._error, self.failed = exc, True
                return None
            repaired_calls = _calls_of(repaired)
            again = find_problem(self.request, repaired_calls)
            if again is not None:
                self.owner.calls.labels(self.pool, "invalid").inc()
                self._error = ToolArgumentsError(f"{again.message} (after one repair attempt)", param=again.param)
                self.failed = True
                return None
            self.owner.calls.labels(self.pool, "repaired").inc()
            self.extra_usage = repaired.get("usage")
            if isinstance(chunk.get("usage"), dict):
                chunk["usage"] = _merged_usage(chunk["usage"], self.extra_usage)
            fragments = _fragments(repaired_calls)
        else:
            self.owner.calls.labels(self.pool, "valid").inc()
        base = {k: v for k, v in chunk.items() if k not in ("usage", "choices")}
        return [
            _data(
                {
                    **base,
                    "choices": [{"index": 0, "delta": {"tool_calls": [f]}, "logprobs": None, "finish_reason": None}],
                }
            )
            for f in fragments
        ]

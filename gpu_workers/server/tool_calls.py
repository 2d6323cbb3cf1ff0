"""SmolLM2's own tool-calling format for the local worker: render tool definitions and tool turns into its prompt,
parse its `<tool_call>[...]</tool_call>` output into OpenAI tool calls, whole or as stream deltas.

The format (docs/tools.md cites the sources: the SmolLM2-Instruct model card's function-calling instructions, and the
Ollama `smollm2` template built from them): the tools go into the system prompt as JSON inside `<tools>...</tools>`;
the model answers with `<tool_call>[{"name": ..., "arguments": {...}}, ...]</tool_call>`; a tool result goes back as a
user turn `<tool_response>\\n...\\n</tool_response>`. The GGUF's own chat template knows none of this (it renders only
role and content), so tool turns are rewritten into plain messages here before the template runs.

tool_choice: `none` leaves the tools out of the prompt and never parses calls; `auto` parses whatever the model wrote;
`required` / a named function prefill the model's own marker and constrain the rest with `SamplingParams.json_schema`
(the engine honours it where it can: functions of gpu_workers/transformers_engine/structured_decoding.py), then parse
the JSON it wrote.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from shared.wire.schemas import ChatCompletionRequest, ChatMessage
from shared.wire.tools_api import (
    FunctionCall,
    FunctionCallDelta,
    NamedToolChoice,
    ToolCall,
    ToolCallDelta,
    ToolDefinition,
)

START, END = "<tool_call>", "</tool_call>"

# The instructions SmolLM2-Instruct was tuned with (Synth-APIGen), in substance: tools as JSON in <tools>, calls as a
# JSON list in <tool_call>.
TOOLS_PROMPT = """You are an expert in composing functions. You are given a question and a set of possible functions.
Based on the question, you will need to make one or more function/tool calls to achieve the purpose.
If none of the functions can be used, point it out and refuse to answer.
If the given question lacks the parameters required by the function, also point it out.

You have access to the following tools:
<tools>{tools}</tools>

The output MUST strictly adhere to the following format, and NO other text MUST be included.
The example format is as follows. Please make sure the parameter type is correct. If no function call is needed, \
please make the tool calls an empty list '[]'.
<tool_call>[
{{"name": "func_name1", "arguments": {{"argument1": "value1", "argument2": "value2"}}}},
... (more tool calls as required)
]</tool_call>"""

Mode = Literal["none", "auto", "required", "named"]


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True)
class ToolPlan:
    """How one request uses tools: its mode, the tools the prompt shows, the forced function (named mode)."""

    mode: Mode
    tools: list[ToolDefinition]
    forced: str | None = None
    parallel: bool = True

    @property
    def shows_tools(self) -> bool:
        return self.mode != "none" and bool(self.tools)

    def prefill(self) -> str:
        """Text that opens the assistant's answer in the model's own format (the model writes what follows)."""
        if self.mode == "named":
            return f'{START}[\n{{"name": {json.dumps(self.forced)}, "arguments": '
        return START if self.mode == "required" else ""

    def json_schema(self) -> dict[str, Any] | None:
        """What constrained decoding holds the output to after the prefill (None: free text)."""
        if self.mode == "named":
            return self._parameters(self.forced)
        if self.mode != "required":
            return None
        items = [
            {
                "type": "object",
                "properties": {"name": {"const": t.function.name}, "arguments": self._parameters(t.function.name)},
                "required": ["name", "arguments"],
            }
            for t in self.tools
        ]
        schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": items}}
        if not self.parallel:
            schema["maxItems"] = 1
        return schema

    def _parameters(self, name: str | None) -> dict[str, Any]:
        fn = next(t.function for t in self.tools if t.function.name == name)
        return fn.parameters if fn.parameters is not None else {"type": "object"}


def plan_for(request: ChatCompletionRequest) -> ToolPlan | None:
    """The request's tool plan; None when it brings no tools (plain chat)."""
    if not request.tools:
        return None
    choice = request.tool_choice or "auto"
    parallel = request.parallel_tool_calls is not False
    if isinstance(choice, NamedToolChoice):
        return ToolPlan("named", request.tools, choice.function.name, parallel)
    return ToolPlan(choice, request.tools, None, parallel)


def call_text(calls: list[ToolCall]) -> str:
    """An assistant's calls as the model writes them (arguments verbatim: the bytes stay as they were stored)."""
    items = [f'{{"name": {json.dumps(c.function.name)}, "arguments": {c.function.arguments or "{}"}}}' for c in calls]
    return f"{START}[\n" + ",\n".join(items) + f"\n]{END}"


def render_messages(messages: list[ChatMessage], plan: ToolPlan | None) -> list[dict[str, str]]:
    """OpenAI messages (tool turns included) -> the role/content messages SmolLM2's chat template renders."""
    out: list[dict[str, str]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{m.text()}\n</tool_response>"})
        elif m.role == "assistant" and m.tool_calls:
            text = m.text()
            out.append({"role": "assistant", "content": (text + "\n" if text else "") + call_text(m.tool_calls)})
        else:
            out.append({"role": m.role, "content": m.text()})
    if plan is not None and plan.shows_tools:
        tools = json.dumps([t.model_dump(exclude_none=True) for t in plan.tools], ensure_ascii=False)
        prompt = TOOLS_PROMPT.format(tools=tools)
        if out and out[0]["role"] in ("system", "developer"):
            out[0] = {"role": "system", "content": prompt + "\n\n" + out[0]["content"]}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


def _first_json(text: str) -> tuple[Any, str] | None:
    """The first JSON value at the start of `text` (after whitespace) and its exact text; None if there is none."""
    stripped = text.lstrip()
    try:
        value, end = json.JSONDecoder().raw_decode(stripped)
    except ValueError:
        return None
    return value, stripped[:end]


def _calls_from(value: Any) -> list[ToolCall] | None:
    """`[{"name", "arguments"}, ...]` (or one such object) as tool calls; None if it is not that shape."""
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        args = item.get("arguments", item.get("parameters", {}))
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        calls.append(ToolCall(id=new_call_id(), function=FunctionCall(name=item["name"], arguments=text)))
    return calls


def parse_output(text: str, plan: ToolPlan) -> tuple[str | None, list[ToolCall]]:
    """(content, tool calls) of a whole answer written after `plan.prefill()`."""
    if plan.mode == "none":
        return text, []
    if plan.mode == "named":
        found = _first_json(text)
        # Unconstrained, the model may not write JSON: the call still names the forced function and the gateway
        # judges the arguments (functions/chat/tool_arguments.py).
        arguments = found[1] if found is not None else text.strip()
        return None, [ToolCall(id=new_call_id(), function=FunctionCall(name=plan.forced or "", arguments=arguments))]
    if plan.mode == "required":
        found = _first_json(text)
        calls = _calls_from(found[0]) if found is not None else None
        if calls:
            return None, calls[: None if plan.parallel else 1]
        text = START + text
    content, calls = _parse_blocks(text)
    return content, calls[: None if plan.parallel else 1]


def _parse_blocks(text: str) -> tuple[str | None, list[ToolCall]]:
    """Every `<tool_call>...</tool_call>` block that parses becomes calls; the rest of the text stays content (a block
    that does not parse stays content too, as vLLM's parsers leave it)."""
    calls: list[ToolCall] = []
    content: list[str] = []
    rest = text
    while (start := rest.find(START)) != -1:
        content.append(rest[:start])
        end = rest.find(END, start)
        block = rest[start + len(START) : end if end != -1 else len(rest)]
        found = _first_json(block)
        parsed = _calls_from(found[0]) if found is not None else None
        if parsed is None:
            content.append(rest[start : end + len(END) if end != -1 else len(rest)])
        else:
            calls.extend(parsed)
        rest = rest[end + len(END) :] if end != -1 else ""
    content.append(rest)
    joined = "".join(content)
    if calls:
        joined = joined.strip()
    return (joined or None) if calls else joined, calls


def _held_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that could be the start of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


@dataclass
class ToolStreamParser:
    """Text deltas in, (content delta, tool-call deltas) out. Text that may start a `<tool_call>` marker is held back
    until it is known not to; a call is sent once its JSON is complete: id, type and name first, then arguments."""

    plan: ToolPlan
    _text: str = ""
    _sent: int = 0  # characters of _text already sent as content (auto mode)
    calls: list[ToolCall] = field(default_factory=list)

    def feed(self, delta: str) -> tuple[str, list[ToolCallDelta]]:
        self._text += delta
        if self.plan.mode == "none":
            return self._take_content(len(self._text)), []
        if self.plan.mode != "auto":
            return "", []  # forced: the whole output is the call; sent when it is complete (finish)
        start = self._text.find(START, self._sent)
        if start == -1:
            return self._take_content(len(self._text) - _held_suffix(self._text, START)), []
        return self._take_content(start), []

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        """The end of the answer: whatever was held, and the calls."""
        if self.plan.mode == "none":
            return self._take_content(len(self._text)), []
        content, calls = parse_output(self._text if self.plan.mode != "auto" else self._text[self._sent :], self.plan)
        if not calls:
            return (content or "") if self.plan.mode == "auto" else "", []
        self.calls = calls
        deltas: list[ToolCallDelta] = []
        for i, call in enumerate(calls):
            name = FunctionCallDelta(name=call.function.name, arguments="")
            deltas.append(ToolCallDelta(index=i, id=call.id, type="function", function=name))
            deltas.append(ToolCallDelta(index=i, function=FunctionCallDelta(arguments=call.function.arguments)))
        text = content if self.plan.mode == "auto" and content else ""
        return text, deltas

    def _take_content(self, upto: int) -> str:
        upto = max(upto, self._sent)
        piece = self._text[self._sent : upto]
        self._sent = upto
        return piece

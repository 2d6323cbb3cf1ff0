"""Pydantic wire models of OpenAI's Responses API request (`POST /v1/responses`), for the fields fleetchat serves, and
the record a stored response keeps with its answer (docs/responses.md).

Every field OpenAI's description defines is declared: a field fleetchat cannot honour is refused with a 400 naming it
by functions/responses/translate.py (never dropped); a field OpenAI does not define is a 400 here, as OpenAI refuses
it. Item and tool types OpenAI defines but no pool can produce or run (images, reasoning, web search, ...) parse into
`Unsupported*` models so the refusal names the type instead of failing a discriminator."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from shared.wire.retrieval_api import FileSearchTool

RESPONSE_ID_RE = re.compile(r"^resp_[0-9a-f]{48}$")
MAX_METADATA_KEYS = 16  # OpenAI's limit: 16 pairs, keys up to 64 characters, values up to 512


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _tagged(known: tuple[str, ...], default: str | None = None) -> Discriminator:
    """A discriminator on `type`: a known type picks its model, any other `unsupported` (refused by name later);
    `default`: the type of an item that names none (OpenAI's easy input message)."""

    def tag(value: Any) -> str:
        kind = value.get("type", default) if isinstance(value, dict) else getattr(value, "type", None) or default
        return kind if kind in known else "unsupported"

    return Discriminator(tag)


# -- content parts ---------------------------------------------------------------------------------------------------
class InputText(_Strict):
    type: Literal["input_text"]
    text: str


class OutputTextPart(_Strict):
    """An earlier answer's text, as a client replays it (`annotations` and `logprobs` never reach a model)."""

    type: Literal["output_text"]
    text: str
    annotations: list[dict[str, Any]] | None = Field(default=None, exclude=True)
    logprobs: list[dict[str, Any]] | None = Field(default=None, exclude=True)


class RefusalPart(_Strict):
    type: Literal["refusal"]
    refusal: str


class UnsupportedPart(BaseModel):
    """`input_image`, `input_file`, `input_audio`: content no pool reads (refused by name)."""

    model_config = ConfigDict(extra="allow")

    type: str


ContentPart = Annotated[
    Annotated[InputText, Tag("input_text")]
    | Annotated[OutputTextPart, Tag("output_text")]
    | Annotated[RefusalPart, Tag("refusal")]
    | Annotated[UnsupportedPart, Tag("unsupported")],
    _tagged(("input_text", "output_text", "refusal")),
]


# -- input items -----------------------------------------------------------------------------------------------------
class MessageItem(_Strict):
    """A message: OpenAI's easy form (`{"role", "content"}`), its typed input message, or an earlier output message
    replayed (`role: assistant` with `output_text` parts; its `id` and `status` are accepted and ignored)."""

    type: Literal["message"] | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]
    id: str | None = None
    status: str | None = None
    phase: str | None = None


class FunctionCallItem(_Strict):
    """A function call an earlier answer made, replayed."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1, max_length=128)
    name: str
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(_Strict):
    """The result of a function call, sent back for the model to read."""

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1, max_length=128)
    output: str | list[ContentPart]
    id: str | None = None
    status: str | None = None


class ReasoningText(_Strict):
    type: Literal["reasoning_text", "summary_text"]
    text: str


class ReasoningItem(_Strict):
    """A reasoning model's reasoning from an earlier answer, replayed by a client that manages its own context:
    accepted and, as reasoning models' chat templates do with earlier turns' reasoning, kept out of the prompt."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[ReasoningText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: str | None = None


class UnsupportedItem(BaseModel):
    """Item types fleetchat cannot take (item references, built-in tool calls, ...): refused by name."""

    model_config = ConfigDict(extra="allow")

    type: str


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[UnsupportedItem, Tag("unsupported")],
    _tagged(("message", "function_call", "function_call_output", "reasoning"), default="message"),
]


# -- tools -----------------------------------------------------------------------------------------------------------
class FunctionTool(_Strict):
    """A function the client runs (the Responses API's flat shape: `name` beside `type`)."""

    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    # OpenAI fields for tool search and programmatic callers: refused when set (functions/responses/translate.py).
    output_schema: dict[str, Any] | None = None
    defer_loading: bool | None = None
    allowed_callers: list[Any] | None = None


class UnsupportedTool(BaseModel):
    """Built-in tools no pool runs (web search, code interpreter, computer use, MCP, ...): refused by name."""

    model_config = ConfigDict(extra="allow")

    type: str


Tool = Annotated[
    Annotated[FunctionTool, Tag("function")]
    | Annotated[FileSearchTool, Tag("file_search")]
    | Annotated[UnsupportedTool, Tag("unsupported")],
    _tagged(("function", "file_search")),
]


class FunctionChoice(_Strict):
    type: Literal["function"]
    name: str


class HostedChoice(_Strict):
    type: Literal["file_search"]


ToolChoice = Literal["none", "auto", "required"] | FunctionChoice | HostedChoice


# -- text format -----------------------------------------------------------------------------------------------------
class TextFormat(_Strict):
    """`text.format`: `text`, `json_object`, or `json_schema` with its fields beside `type` (the Responses shape)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextParam(_Strict):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningParam(_Strict):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class ConversationRef(_Strict):
    id: str


class StreamOptionsParam(_Strict):
    include_obfuscation: bool | None = None  # padding against length side channels: fleetchat adds none


# -- the request -----------------------------------------------------------------------------------------------------
class ResponsesRequest(_Strict):
    """`POST /v1/responses`. `store` defaults to true, as at OpenAI: the exchange is kept as a conversation turn."""

    model: str
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationRef | None = None
    store: bool = True
    stream: bool = False
    stream_options: StreamOptionsParam | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    max_tool_calls: int | None = Field(default=None, ge=1)
    text: TextParam | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    include: list[str] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = Field(default=None, max_length=64)
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in-memory", "in_memory", "24h"] | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    reasoning: ReasoningParam | None = None
    background: bool | None = None
    # OpenAI fields for features fleetchat does not offer: refused when set (functions/responses/translate.py).
    prompt: dict[str, Any] | None = None
    moderation: Any = None
    context_management: Any = None
    prompt_cache_options: Any = None

    @field_validator("metadata")
    @classmethod
    def _metadata_bounds(cls, metadata: dict[str, str] | None) -> dict[str, str] | None:
        if metadata is None:
            return None
        if len(metadata) > MAX_METADATA_KEYS:
            raise ValueError(f"at most {MAX_METADATA_KEYS} metadata pairs are allowed")
        if any(len(key) > 64 or len(value) > 512 for key, value in metadata.items()):
            raise ValueError("metadata keys are at most 64 characters and values at most 512")
        return metadata

    def conversation_id(self) -> str | None:
        if self.conversation is None:
            return None
        return self.conversation if isinstance(self.conversation, str) else self.conversation.id


# -- what a stored response keeps ------------------------------------------------------------------------------------
class ResponseUsageRecord(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0


class ResponseRecord(BaseModel):
    """Kept with a stored response's answer (the conversation's assistant message): its id and the request fields a
    retrieved Response repeats. Metadata: never rendered into a prompt. Retention, export and erasure treat it as
    part of the conversation it lives in."""

    id: str
    created_at: int
    model: str
    previous_response_id: str | None = None
    instructions: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    usage: ResponseUsageRecord | None = None
    # How many stored messages its input added (before its answer); None in records kept before it was.
    input_messages: int | None = None

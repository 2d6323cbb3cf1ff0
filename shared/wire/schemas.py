"""Pydantic wire models of the OpenAI chat-completions protocol, for the fields fleetchat serves."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.wire.retrieval_api import MAX_VECTOR_STORES, FileSearchTool
from shared.wire.sampling_api import ChoiceLogprobs, SamplingFields
from shared.wire.tools_api import ToolCall, ToolCallDelta, ToolChoice, ToolDefinition

Role = Literal["system", "developer", "user", "assistant", "tool"]


class TextContentPart(BaseModel):
    type: Literal["text"]
    text: str


class ImageUrl(BaseModel):
    """OpenAI's `image_url`: an `https://` URL (the gateway fetches it) or a `data:image/...;base64,` URI."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high"] | None = None


class ImageContentPart(BaseModel):
    """An image in a user message, for a model that sees (docs/api-parameters.md, "Images")."""

    type: Literal["image_url"]
    image_url: ImageUrl


ContentPart = Annotated[TextContentPart | ImageContentPart, Field(discriminator="type")]


class ChatMessage(BaseModel):
    """A message as OpenAI takes it. A field OpenAI does not define is a 400 naming it (`messages.0.foo`), as OpenAI
    refuses it; the fields OpenAI's SDK sends back with an answer it received (`refusal`, `annotations`, a reasoning
    model's `reasoning`, and null `audio` and `function_call`) are accepted and never reach a model."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    # Function calling (shared/wire/tools_api.py): an assistant message's calls (its content may be null), and the call
    # a `tool` message answers.
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    # What an answer carried besides its text, sent back by clients that replay it: kept out of every prompt.
    refusal: str | None = Field(default=None, exclude=True)
    annotations: list[dict[str, Any]] | None = Field(default=None, exclude=True)
    audio: None = Field(default=None, exclude=True)  # audio answers: no pool produces them
    function_call: None = Field(default=None, exclude=True)  # the legacy call field: `tool_calls` replaces it
    # A reasoning model's reasoning (vLLM's `reasoning`, formerly `reasoning_content`) sent back with its answer by
    # clients that keep it (interleaved thinking): accepted and, as reasoning models' chat templates do, not rendered.
    reasoning: str | None = Field(default=None, exclude=True)
    reasoning_content: str | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _images_from_the_user(self) -> ChatMessage:
        if self.role != "user" and self.images():
            raise ValueError("`image_url` content parts are taken in user messages only")
        return self

    def text(self) -> str:
        """The message's content as one string (text parts joined in order; images are not text)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if isinstance(part, TextContentPart))

    def images(self) -> list[ImageContentPart]:
        """The message's image parts, in order."""
        if not isinstance(self.content, list):
            return []
        return [part for part in self.content if isinstance(part, ImageContentPart)]


class StreamOptions(BaseModel):
    include_usage: bool = False
    # vLLM's extension: usage so far on every chunk (the gateway bills an aborted stream by it).
    continuous_usage_stats: bool = False


class JsonSchemaFormat(BaseModel):
    """`response_format.json_schema`: the schema the answer must validate against (`schema` is a reserved pydantic
    name, hence the alias; the body is forwarded to workers by alias, so vLLM sees OpenAI's field names)."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """OpenAI's `response_format`: `text`, `json_object` or `json_schema` (docs/structured-outputs.md). One model
    rather than a tagged union so a bad field's `param` reads `response_format.json_schema.schema`."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("`json_schema` is required with type `json_schema` and allowed only with it")
        return self


class ChatCompletionRequest(SamplingFields):
    """A chat-completions request. Unknown fields are kept so later layers (conversations) can read them; the sampling
    parameters beyond temperature and top-p are declared in shared/wire/sampling_api.py."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=128)  # choices (docs/api-parameters.md: what several choices cannot carry)
    # Honoured by pools whose model reasons (shared/fleet/pools.reasons), passed to vLLM; a 400 elsewhere.
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    # OpenAI's `store`: keep this exchange as a new conversation. `conversation_id` (extension): continue one.
    store: bool | None = None
    conversation_id: str | None = Field(default=None, max_length=64)
    # Extensions on the conversation's message tree (docs/conversations.md, "Branches"), ids as
    # `GET /v1/conversations/{id}` lists them. `replace_from`: edit-and-resend / regenerate: this request's user
    # message goes beside the stored user message with that id (a new version; the same text again regenerates its
    # answer); nothing is removed. `parent_message_id`: continue after that message instead of the active branch.
    replace_from: int | None = Field(default=None, ge=0)
    parent_message_id: int | None = Field(default=None, ge=0)
    # vLLM's extensions (docs/reliability.md): `continue_final_message` leaves the final (assistant) message open and
    # the model continues it, without a new generation prompt; `add_generation_prompt` defaults to true, as in vLLM.
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    # Function calling (docs/tools.md); checked by shared/tools_api.check_tool_request.
    tools: list[ToolDefinition] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    # Retrieval (docs/files.md): passages from these vector stores answer the question, with citations. OpenAI's
    # `file_search` tools in `tools` are lifted out into `file_search` (the gateway runs the search; workers never see
    # it as a tool).
    vector_store_ids: list[str] | None = Field(default=None, min_length=1, max_length=MAX_VECTOR_STORES)
    file_search: list[FileSearchTool] | None = None

    @model_validator(mode="before")
    @classmethod
    def _lift_file_search(cls, data: Any) -> Any:
        tools = data.get("tools") if isinstance(data, dict) else None
        searches = [t for t in tools or [] if isinstance(t, dict) and t.get("type") == "file_search"]
        if not isinstance(tools, list) or not searches:
            return data
        others = [t for t in tools if not (isinstance(t, dict) and t.get("type") == "file_search")]
        lifted = {**data, "tools": others or None, "file_search": searches}
        choice = data.get("tool_choice")
        # "auto" over file_search alone, or a choice naming it: the search always runs, so nothing is left to choose.
        if (not others and choice == "auto") or (isinstance(choice, dict) and choice.get("type") == "file_search"):
            lifted["tool_choice"] = None
        return lifted

    @field_validator("stop")
    @classmethod
    def _at_most_four_stops(cls, stop: str | list[str] | None) -> str | list[str] | None:
        if isinstance(stop, list) and len(stop) > 4:
            raise ValueError("at most 4 stop sequences are allowed")
        if isinstance(stop, list) and any(s == "" for s in stop):
            raise ValueError("stop sequences must not be empty")
        return stop

    @model_validator(mode="after")
    def _replace_needs_a_conversation(self) -> ChatCompletionRequest:
        if self.replace_from is not None and self.conversation_id is None:
            raise ValueError("replace_from needs conversation_id (the body field)")
        if self.parent_message_id is not None and self.conversation_id is None:
            raise ValueError("parent_message_id needs conversation_id (the body field)")
        if self.parent_message_id is not None and self.replace_from is not None:
            raise ValueError("send replace_from (an edit goes beside that message) or parent_message_id, not both")
        return self

    @model_validator(mode="after")
    def _continue_without_generation_prompt(self) -> ChatCompletionRequest:
        # vLLM rejects both set true; the generation prompt defaults to true there too, so it must be set false.
        if self.continue_final_message and self.add_generation_prompt is not False:
            raise ValueError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        return self

    @model_validator(mode="after")
    def _min_tokens_within_budget(self) -> ChatCompletionRequest:
        self.check_min_tokens(self.output_limit())
        return self

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> ChatCompletionRequest:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed when stream is true")
        return self

    def output_limit(self) -> int | None:
        """The completion budget the client asked for (`max_completion_tokens` wins, as in OpenAI)."""
        return self.max_completion_tokens or self.max_tokens

    def stop_sequences(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


FinishReason = Literal["stop", "length", "content_filter", "abort", "tool_calls"]


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] | None = None


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: FinishReason | None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[Choice]
    usage: Usage


class DeltaMessage(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: DeltaMessage
    finish_reason: FinishReason | None = None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


class ModelCapabilities(BaseModel):
    """What a model answers (fleetchat's extension of OpenAI's model object, docs/api.md)."""

    chat_completions: bool = False
    responses: bool = False  # /v1/responses (docs/responses.md)
    completions: bool = False
    embeddings: bool = False
    rerank: bool = False  # /v1/rerank (docs/rerank.md)
    moderations: bool = False
    tools: bool = False
    structured_output: bool = False
    logprobs: bool = False
    vision: bool = False
    reasoning: bool = False


class ModelPricing(BaseModel):
    """What a million tokens cost the customer, in USD: the operator's list prices (its Stripe prices charge the same;
    fleetchat's extension of the model object, and what `GET /v1/usage` prices the ledger's tokens at)."""

    model_config = ConfigDict(extra="forbid")

    input_usd_per_mtok: float = Field(ge=0)  # prompt tokens the prefix cache did not serve
    cached_input_usd_per_mtok: float = Field(ge=0)
    output_usd_per_mtok: float = Field(ge=0)
    # A line of a batch (/v1/batches) pays this share of the prices above (OpenAI's batch price is half).
    batch_multiplier: float = Field(default=0.5, gt=0, le=1)

    def for_batch(self) -> ModelPricing:
        """The batch price: every token price times `batch_multiplier`."""
        m = self.batch_multiplier
        return self.model_copy(
            update={
                "input_usd_per_mtok": self.input_usd_per_mtok * m,
                "cached_input_usd_per_mtok": self.cached_input_usd_per_mtok * m,
                "output_usd_per_mtok": self.output_usd_per_mtok * m,
                "batch_multiplier": 1.0,
            }
        )

    def cost_usd(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> float:
        """The charge for tokens as the ledger counts them (cached tokens are part of the prompt's)."""
        uncached = max(prompt_tokens - cached_tokens, 0)
        return (
            uncached * self.input_usd_per_mtok
            + cached_tokens * self.cached_input_usd_per_mtok
            + completion_tokens * self.output_usd_per_mtok
        ) / 1e6


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "fleetchat"
    max_model_len: int | None = None  # vLLM's name: the context in tokens (an embedding model's longest input)
    # fleetchat: the model behind the pool (`package/file.gguf` locally, `hf_repo@revision` deployed).
    model_version: str | None = None
    capabilities: ModelCapabilities | None = None
    dimensions: int | None = None  # an embedding model's vector length
    pricing: ModelPricing | None = None  # the list prices, where the operator set them


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class WorkerHealth(BaseModel):
    status: Literal["ok", "loading", "error"]
    model: str
    max_model_len: int

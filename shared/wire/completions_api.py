"""Pydantic wire models of OpenAI's legacy completions protocol (`POST /v1/completions`), as vLLM serves it: a prompt as
text or token ids (one or a batch), `echo`, `logprobs` as a count, streaming; what lm-evaluation-harness's
`local-completions` sends to score log-likelihoods (docs/completions.md)."""

from __future__ import annotations

import time
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.wire.sampling_api import SamplingControls, not_a_bool
from shared.wire.schemas import StreamOptions, Usage

MAX_PROMPTS = 64  # prompts in one request (each is a choice)
MAX_COMPLETION_LOGPROBS = 20  # vLLM's bound (OpenAI's is 5)

TokenIds = list[Annotated[int, Field(ge=0)]]
Prompt = str | list[str] | TokenIds | list[TokenIds]


class CompletionRequest(SamplingControls):
    """A completions request; unknown fields are refused by the gateway as OpenAI refuses them."""

    model_config = ConfigDict(extra="allow")

    model: str
    prompt: Prompt
    max_tokens: int | None = Field(default=16, ge=0)  # OpenAI's default; 0 only with `echo` (score the prompt)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=128)  # choices per prompt (the tier's `max_choices` bounds them further)
    best_of: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=MAX_COMPLETION_LOGPROBS)
    suffix: str | None = None
    user: str | None = None

    @field_validator("logprobs", "n", "best_of", mode="before")
    @classmethod
    def _a_count_is_not_a_bool(cls, value: object) -> object:
        return not_a_bool(value)

    @field_validator("prompt")
    @classmethod
    def _some_prompt(cls, prompt: Prompt) -> Prompt:
        if isinstance(prompt, list) and not prompt:
            raise ValueError("prompt must not be empty")
        if isinstance(prompt, list) and isinstance(prompt[0], list | str) and len(prompt) > MAX_PROMPTS:
            raise ValueError(f"at most {MAX_PROMPTS} prompts in one request")
        if isinstance(prompt, list) and any(isinstance(p, list) and not p for p in prompt):
            raise ValueError("a token-id prompt must not be empty")
        return prompt

    @field_validator("best_of")
    @classmethod
    def _best_of_one(cls, best_of: int | None) -> int | None:
        if best_of not in (None, 1):  # choosing the best of several needs their sequence log-probabilities
            raise ValueError("only best_of=1 is supported")
        return best_of

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, suffix: str | None) -> str | None:
        if suffix:  # insertion needs a fill-in-the-middle model; the pools serve chat models
            raise ValueError("suffix is not supported: fleetchat's models do not fill in the middle")
        return suffix

    @model_validator(mode="after")
    def _consistent(self) -> CompletionRequest:
        if self.max_tokens == 0 and not self.echo:
            raise ValueError("max_tokens may be 0 only with echo (scoring the prompt)")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed when stream is true")
        self.check_min_tokens(self.max_tokens)
        return self

    def prompts(self) -> list[str | TokenIds]:
        """Each prompt of the request (`n` choices each), as text or token ids."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [prompt]
        if prompt and all(isinstance(p, int) for p in prompt):
            return [prompt]  # type: ignore[list-item]
        return list(prompt)  # type: ignore[arg-type]

    def stop_sequences(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class CompletionLogprobs(BaseModel):
    """OpenAI's legacy shape: parallel lists over the choice's tokens (echoed prompt first)."""

    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


CompletionFinish = Literal["stop", "length", "content_filter"]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: CompletionFinish | None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class TokenizeRequest(BaseModel):
    """vLLM's `POST /tokenize` for a plain prompt (`model` may be left out: the one model, or the tier's first pool).
    A field vLLM does not define is a 400 naming it."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    prompt: str = Field(max_length=1_000_000)
    add_special_tokens: bool = True
    return_token_strs: bool | None = None  # each token's piece as the tokenizer writes it (vLLM's `token_strs`)


class TokenizeResponse(BaseModel):
    tokens: list[int]
    count: int
    max_model_len: int
    token_strs: list[str] | None = None


class DetokenizeRequest(BaseModel):
    """vLLM's `POST /detokenize`: token ids back to text (the gateway screens token-id prompts as text)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    tokens: TokenIds = Field(max_length=1_000_000)


class TokenizerInfo(BaseModel):
    """vLLM's `GET /tokenizer_info`: what a client needs to tokenize as the model does (lm-evaluation-harness's remote
    tokenizer reads it)."""

    model_config = ConfigDict(extra="allow")

    tokenizer_class: str
    eos_token: str | None = None
    bos_token: str | None = None
    pad_token: str | None = None
    chat_template: str | None = None
    model_max_length: int


class DetokenizeResponse(BaseModel):
    prompt: str

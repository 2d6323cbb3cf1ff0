"""The sampling parameters OpenAI and vLLM take beyond temperature and top-p, as declared, validated request fields.

Every pool honours them: vLLM deployed, the llama.cpp engine locally (gpu_workers/llama_cpp/sampling.py). They are
checked here the way vLLM and OpenAI check them (ranges, `top_logprobs` only with `logprobs`), so a bad value is a
400 naming its field before anything is reserved; token ids are checked against the vocabulary by the worker, which
knows it. docs/api-parameters.md lists them.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, field_validator, model_validator

MAX_TOP_LOGPROBS = 20  # OpenAI's limit
MAX_LOGIT_BIAS = 300  # entries; OpenAI documents the bias range, vLLM the count is bounded by the vocabulary

Bias = Annotated[float, Field(ge=-100.0, le=100.0)]


class SamplingControls(BaseModel):
    """Mixed into a request model: OpenAI's penalties and `logit_bias`, and vLLM's extra sampling parameters, each at
    the value that changes nothing when unset (chat and completions alike; they differ on `logprobs`)."""

    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    # Token id (a JSON object's keys are strings) to a bias added to its logit before sampling.
    logit_bias: dict[str, Bias] | None = Field(default=None, max_length=MAX_LOGIT_BIAS)
    # vLLM's extensions (its SamplingParams): -1 or 0 turns top-k off.
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=10.0)
    min_tokens: int | None = Field(default=None, ge=0)
    ignore_eos: bool | None = None
    stop_token_ids: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, max_length=64)

    @field_validator("logit_bias")
    @classmethod
    def _token_id_keys(cls, bias: dict[str, float] | None) -> dict[str, float] | None:
        for key in bias or {}:
            if not key.isdigit():
                raise ValueError(f"logit_bias keys must be token ids (non-negative integers as strings), got {key!r}")
        return bias

    @field_validator("top_k", "min_tokens", mode="before")
    @classmethod
    def _a_count_is_not_a_bool(cls, value: Any) -> Any:
        return not_a_bool(value)

    def bias_by_token(self) -> dict[int, float]:
        return {int(token): float(bias) for token, bias in (self.logit_bias or {}).items()}

    def check_min_tokens(self, max_tokens: int | None) -> None:
        """vLLM's rule: `min_tokens` cannot exceed the output budget."""
        if self.min_tokens and max_tokens is not None and self.min_tokens > max_tokens:
            raise ValueError(f"min_tokens ({self.min_tokens}) must be at most max_tokens ({max_tokens})")


class SamplingFields(SamplingControls):
    """Chat's sampling fields: the controls, and `logprobs` (a switch) with `top_logprobs` (how many alternatives)."""

    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)

    @field_validator("top_logprobs", mode="before")
    @classmethod
    def _top_logprobs_is_a_count(cls, value: Any) -> Any:
        return not_a_bool(value)

    @model_validator(mode="after")
    def _top_logprobs_need_logprobs(self) -> SamplingFields:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("`top_logprobs` needs `logprobs` set to true")
        return self

    def logprobs_wanted(self) -> int | None:
        """How many alternatives each token's entry lists (0: only the chosen token); None: no log-probabilities."""
        return (self.top_logprobs or 0) if self.logprobs else None


def not_a_bool(value: Any) -> Any:
    if isinstance(value, bool):  # Python reads `true` as 1: a count must be a number
        raise ValueError("must be an integer, not a boolean")
    return value


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(BaseModel):
    """One generated token's entry in `choices[].logprobs.content` (OpenAI's shape)."""

    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None = None
    refusal: list[TokenLogprob] | None = None

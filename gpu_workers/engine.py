"""The engine contract the worker server depends on, so any engine (transformers, a fake, ...) can be hosted.

An engine owns tokenization and generation. `generate` is an async iterator of `EngineOutput`s carrying only the
*new* token ids since the previous output; the last one has `finished=True`. Closing the iterator early (client
gone, stop string matched) must abort the request inside the engine and free its KV blocks.

Example::

    ids = engine.tokenize_chat([{"role": "user", "content": "hi"}])
    async for out in engine.generate("req-1", ids, SamplingParams(max_tokens=16)):
        print(engine.decode(out.new_token_ids), out.finished)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field


class SamplingParams(BaseModel):
    """How one request picks its tokens, with vLLM's meanings and its order: logit bias (and the end-of-sequence ban
    while `min_tokens` are not yet out), penalties, then greedy at temperature 0, else temperature, min-p, top-k,
    top-p and a seeded draw."""

    max_tokens: int = Field(ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    # constrain the output to this JSON schema ({"type": "object"} for json_object)
    json_schema: dict[str, Any] | None = None
    top_k: int = Field(default=-1, ge=-1)  # -1 or 0: off
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    # OpenAI's: subtracted per occurrence (frequency) and once (presence) for tokens already in the answer.
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    # vLLM's (and transformers'): positive logits divided, negative multiplied, for tokens in the prompt or answer.
    repetition_penalty: float = Field(default=1.0, gt=0.0)
    logit_bias: dict[int, float] = Field(default_factory=dict)
    min_tokens: int = Field(default=0, ge=0)  # the end-of-sequence and stop tokens are banned until this many
    ignore_eos: bool = False  # the end-of-sequence token does not end the answer (it is generated, not shown)
    stop_token_ids: list[int] = Field(default_factory=list)  # these end the answer too (finish reason "stop")
    # Log-probabilities of each chosen token (from the model's raw logits, as vLLM reports them) with this many of
    # the likeliest alternatives; None: none.
    logprobs: int | None = Field(default=None, ge=0, le=20)
    # The same for every prompt token but the first (completions' `echo` with `logprobs`; vLLM's `prompt_logprobs`).
    prompt_logprobs: int | None = Field(default=None, ge=0, le=20)

    def extended(self) -> set[str]:
        """The parameters set away from their no-op value beyond max_tokens, temperature, top-p, seed and schema
        (what an engine must honour or refuse: `Engine.honours`)."""
        plain = SamplingParams(max_tokens=self.max_tokens)
        return {name for name in EXTENDED_SAMPLING if getattr(self, name) != getattr(plain, name)}


# What every engine honours; the rest of SamplingParams is honoured where an engine's `honours` names it.
BASE_SAMPLING = frozenset({"max_tokens", "temperature", "top_p", "seed", "json_schema"})
EXTENDED_SAMPLING = frozenset(SamplingParams.model_fields) - BASE_SAMPLING


@dataclass(slots=True)
class TokenLogprobs:
    """A chosen token's log-probability and the likeliest alternatives', as (token id, log-probability), best first."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]]


@dataclass(slots=True)
class EngineOutput:
    new_token_ids: list[int]
    finished: bool
    finish_reason: Literal["stop", "length"] | None
    # Prompt tokens served from the prefix cache (known once the request is scheduled).
    cached_tokens: int
    # Tokens generated so far, end-of-sequence token included (what usage bills, as vLLM counts it).
    generated_total: int
    # One entry per token of `new_token_ids` when the request asked for log-probabilities.
    logprobs: list[TokenLogprobs] | None = None
    # With the first output of a request that asked for them: one per prompt token, None for the first.
    prompt_logprobs: list[TokenLogprobs | None] | None = None


@dataclass(slots=True)
class EngineStats:
    running: int
    waiting: int
    kv_cache_usage: float  # 0..1
    prefix_cache_queries: int  # prompt tokens looked up in the prefix cache, cumulative
    prefix_cache_hits: int  # of which found, cumulative


class EngineError(RuntimeError):
    """The engine failed a request (or every request in flight)."""


class Engine(Protocol):
    model_name: str
    max_model_len: int
    vocab_size: int
    # The `SamplingParams.extended()` names this engine honours; the worker refuses a request that sets any other.
    honours: frozenset[str]

    def tokenize_chat(
        self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True, continue_final: bool = False
    ) -> list[int]:
        """Render messages with the model's chat template into token ids: with the assistant's generation prompt
        added, or (`continue_final`) with the final message left open, no end-of-turn marker, for the model to go
        on with it (vLLM's `continue_final_message`)."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str:
        """Token ids to text, special tokens skipped."""
        ...

    def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Plain text (a completions prompt) to token ids."""
        ...

    def tokenizer_info(self) -> dict[str, Any]:
        """`tokenizer_class`, `eos_token`, `bos_token`, `pad_token` and `chat_template` (vLLM's `/tokenizer_info`)."""
        ...

    def token_bytes(self, token_id: int) -> bytes:
        """One token's own bytes (a piece of a UTF-8 character for some), for log-probability entries."""
        ...

    def token_strs(self, token_ids: Sequence[int]) -> list[str]:
        """Each token's piece as the tokenizer writes it (vLLM's `/tokenize` `token_strs`)."""
        ...

    def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[EngineOutput]: ...

    def stats(self) -> EngineStats: ...

    def shutdown(self) -> None: ...

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
    max_tokens: int = Field(ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    # constrain the output to this JSON schema ({"type": "object"} for json_object)
    json_schema: dict[str, Any] | None = None


@dataclass(slots=True)
class EngineOutput:
    new_token_ids: list[int]
    finished: bool
    finish_reason: Literal["stop", "length"] | None
    # Prompt tokens served from the prefix cache (known once the request is scheduled).
    cached_tokens: int
    # Tokens generated so far, end-of-sequence token included (what usage bills, as vLLM counts it).
    generated_total: int


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

    def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[EngineOutput]: ...

    def stats(self) -> EngineStats: ...

    def shutdown(self) -> None: ...

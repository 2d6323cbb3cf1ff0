"""Constrained decoding for the embedded engine: each constrained request's llguidance matcher masks the logits of
that request's row on every step, so only tokens that keep the answer a prefix of a schema-valid JSON value can be
sampled, and end-of-sequence only once the value is complete.

How it hooks into transformers' continuous batching (5.23, sync batching; see docs/structured-outputs.md): the
manager's logits-processor list applies plain processors as `processor(input_ids, scores)` where `scores` holds one
row per request that samples a token this step, in the order of the batch's `requests_in_batch` that have
`has_new_token`. `GrammarMasks` is such a processor, put first (before temperature and top-p). A row whose request
has no matcher is left alone; with no constrained request in flight the processor returns at once, so free decoding
pays one dict check per step.

A matcher advances lazily: at mask time it consumes the tokens its request generated since the last mask (read from
the request's state on the engine thread), which is exactly the previous step's sample in sync batching.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import llguidance
import numpy as np
import torch

from shared.wire.output_schemas import GrammarError, compile_grammar


@dataclass
class _Constrained:
    matcher: llguidance.LLMatcher
    prompt_len: int  # tokens before the answer (a request restored after offloading carries its answer in its prompt)
    consumed: int = 0
    failure: str | None = None


class GrammarMasks:
    """The per-request grammar state of one engine, and the logits processor that applies it."""

    supports_continuous_batching = True  # transformers keeps processors that say so

    def __init__(self, tokenizer: Any, eos_ids: Iterable[int], batch_rows: Callable[[], list[Any]]) -> None:
        """`batch_rows()` returns the current batch's request states that sample a token, in logits-row order."""
        self._hf_tokenizer = tokenizer
        self._eos_ids = sorted(eos_ids)
        self._batch_rows = batch_rows
        self._ll_tokenizer: llguidance.LLTokenizer | None = None
        self._tokenizer_lock = threading.Lock()
        self._active: dict[str, _Constrained] = {}

    def _tokenizer(self) -> llguidance.LLTokenizer:
        """Built on first use (~0.5 s for SmolLM2's vocabulary), so workers that never constrain never pay it."""
        with self._tokenizer_lock:
            if self._ll_tokenizer is None:
                import llguidance.hf

                self._ll_tokenizer = llguidance.hf.from_tokenizer(self._hf_tokenizer, eos_token=self._eos_ids)
            return self._ll_tokenizer

    def matcher_for(self, schema: dict[str, Any]) -> llguidance.LLMatcher:
        """A fresh matcher for `schema` (call off the event loop: compiling can take milliseconds). Raises
        `GrammarError` for a schema llguidance cannot compile. Keywords it does not implement are ignored here
        (lenient): a strict schema with such keywords was refused with a 400 before it got this far."""
        matcher = llguidance.LLMatcher(self._tokenizer(), compile_grammar(schema, lenient=True), log_level=0)
        if matcher.is_error():
            raise GrammarError(matcher.get_error())
        return matcher

    def track(self, request_id: str, matcher: llguidance.LLMatcher, prompt_len: int) -> None:
        """Constrain a request about to be added to the batch with `matcher`."""
        self._active[request_id] = _Constrained(matcher, prompt_len)

    def register(self, request_id: str, schema: dict[str, Any], prompt_len: int) -> None:
        self.track(request_id, self.matcher_for(schema), prompt_len)

    def discard(self, request_id: str) -> str | None:
        """Forget a request (finished, cancelled or failed); returns why its matcher failed, if it did."""
        state = self._active.pop(request_id, None)
        return state.failure if state is not None else None

    def __len__(self) -> int:
        return len(self._active)

    # -- the logits processor (engine thread) -------------------------------------------------------------------

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if not self._active:
            return scores
        for row, state in enumerate(self._batch_rows()[: scores.size(0)]):
            constrained = self._active.get(state.request_id)
            if constrained is not None:
                self._mask_row(constrained, state, scores[row])
        return scores

    def _mask_row(self, constrained: _Constrained, state: Any, row: torch.Tensor) -> None:
        answer = _answer_tokens(state, constrained.prompt_len)
        matcher = constrained.matcher
        if len(answer) > constrained.consumed and constrained.failure is None:
            if not matcher.consume_tokens(answer[constrained.consumed :]):
                constrained.failure = f"grammar rejected a sampled token: {matcher.get_error()}"
            constrained.consumed = len(answer)
        allowed = _allowed(matcher, row.size(0)) if constrained.failure is None else None
        if allowed is None or not bool(allowed.any()):
            # Nothing can continue the answer (a matcher error): end the request rather than sample from nothing
            # (an all -inf row would fail the whole batch); the engine reports the failure.
            constrained.failure = constrained.failure or f"grammar has no continuation: {matcher.get_error()}"
            allowed = torch.zeros(row.size(0), dtype=torch.bool)
            allowed[self._eos_ids] = True
        row.masked_fill_(~allowed.to(row.device), float("-inf"))


def _allowed(matcher: llguidance.LLMatcher, vocab: int) -> torch.Tensor:
    """The matcher's bitmask (32 tokens per little-endian word) as one bool per token of the model's vocabulary
    (padded or cut to it: a token the tokenizer does not know is never allowed)."""
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
    allowed = torch.from_numpy(bits[:vocab].astype(np.bool_))
    if allowed.size(0) < vocab:
        allowed = torch.cat([allowed, torch.zeros(vocab - allowed.size(0), dtype=torch.bool)])
    return allowed


def _answer_tokens(state: Any, prompt_len: int) -> list[int]:
    """The tokens generated for the request so far. After offloading, transformers re-creates a request with its
    answer appended to its prompt, so the answer is everything after the original prompt."""
    if len(state.initial_tokens) == prompt_len:
        return state.generated_tokens
    return [*state.initial_tokens, *state.generated_tokens][prompt_len:]

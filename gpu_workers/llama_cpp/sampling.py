"""Per-request token choice for the llama.cpp engine: a llama.cpp sampler chain in C for free text, and for
structured outputs the request's llguidance matcher masking its logits row before a numpy draw.

The grammar path mirrors gpu_workers/transformers_engine/structured_decoding.py (same `compile_grammar`, same lenient
schema handling, same failure messages), without torch: the row is a numpy array here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import llguidance
import numpy as np

from gpu_workers.llama_cpp.runtime import LlamaRuntime
from shared.wire.output_schemas import GrammarError, compile_grammar


class GrammarCompiler:
    """Builds llguidance matchers for one tokenizer (its llguidance view is built on first use, ~0.5 s)."""

    def __init__(self, hf_tokenizer: Any, eos_ids: Iterable[int]) -> None:
        self._hf_tokenizer = hf_tokenizer
        self._eos_ids = sorted(eos_ids)
        self._ll_tokenizer: llguidance.LLTokenizer | None = None
        self._lock = threading.Lock()

    def matcher_for(self, schema: dict[str, Any]) -> llguidance.LLMatcher:
        """Call off the event loop. Raises `GrammarError` for a schema llguidance cannot compile."""
        with self._lock:
            if self._ll_tokenizer is None:
                from llguidance.hf import from_tokenizer

                self._ll_tokenizer = from_tokenizer(self._hf_tokenizer, eos_token=self._eos_ids)
        matcher = llguidance.LLMatcher(self._ll_tokenizer, compile_grammar(schema, lenient=True), log_level=0)
        if matcher.is_error():
            raise GrammarError(matcher.get_error())
        return matcher


class RequestSampler:
    """How one request picks its next token; `failure` is set when its grammar cannot go on."""

    def __init__(
        self,
        runtime: LlamaRuntime,
        *,
        temperature: float,
        top_p: float,
        seed: int | None,
        matcher: llguidance.LLMatcher | None,
        eos_ids: Iterable[int],
    ) -> None:
        self._matcher = matcher
        self._eos_ids = sorted(eos_ids)
        self._temperature = temperature
        self._top_p = top_p
        self.failure: str | None = None
        if matcher is None:
            self._chain = runtime.sampler(temperature=temperature, top_p=top_p, seed=seed)
        else:
            self._rng = np.random.default_rng(seed)

    def pick(self, runtime: LlamaRuntime, index: int) -> int:
        if self._matcher is None:
            return runtime.sample(self._chain, index)
        logits = runtime.logits(index)
        allowed = self._allowed(logits.shape[0])
        logits[~allowed] = -np.inf
        token = _draw(logits, self._temperature, self._top_p, self._rng)
        # End-of-sequence ends the request; the matcher never consumes it (as in structured_decoding.py).
        if self.failure is None and token not in self._eos_ids and not self._matcher.consume_tokens([token]):
            self.failure = f"grammar rejected a sampled token: {self._matcher.get_error()}"
        return token

    def _allowed(self, vocab: int) -> np.ndarray:
        allowed: np.ndarray | None = None
        if self.failure is None and not self._matcher.is_error():  # type: ignore[union-attr]
            bits = np.unpackbits(np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")  # type: ignore[union-attr]
            allowed = np.zeros(vocab, dtype=np.bool_)
            allowed[: min(vocab, bits.size)] = bits[:vocab].astype(np.bool_)
        if allowed is None or not allowed.any():
            # Nothing continues the answer (a matcher error): end it rather than sample from nothing.
            self.failure = self.failure or f"grammar has no continuation: {self._matcher.get_error()}"  # type: ignore[union-attr]
            allowed = np.zeros(vocab, dtype=np.bool_)
            allowed[self._eos_ids] = True
        return allowed


def _draw(logits: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> int:
    """Greedy at temperature 0; else temperature, then nucleus (top-p), then a draw."""
    if temperature <= 0:
        return int(np.argmax(logits))
    scaled = logits / temperature
    scaled -= scaled.max()
    probs = np.exp(scaled)
    probs /= probs.sum()
    if top_p < 1.0:
        order = np.argsort(-probs)
        keep = np.cumsum(probs[order]) - probs[order] < top_p  # the smallest set whose mass reaches top_p
        trimmed = np.zeros_like(probs)
        trimmed[order[keep]] = probs[order[keep]]
        probs = trimmed / trimmed.sum()
    return int(rng.choice(probs.size, p=probs))

"""Per-request token choice for the llama.cpp engine, with vLLM's parameters and order (gpu_workers/engine.py's
SamplingParams): a llama.cpp sampler chain in C for free text, and for structured outputs the request's llguidance
matcher masking its logits row before the same steps in numpy (`processed_logits`, `draw_distribution`), which are
also the reference the C chain is tested against. Log-probabilities come from the raw logits, as vLLM reports them.

The grammar path mirrors gpu_workers/transformers_engine/structured_decoding.py (same `compile_grammar`, same lenient
schema handling, same failure messages), without torch: the row is a numpy array here.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import llguidance
import numpy as np

from gpu_workers.engine import SamplingParams, TokenLogprobs
from gpu_workers.llama_cpp.runtime import ChainSpec, LlamaRuntime
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
    """How one request picks its next token; `failure` is set when its grammar cannot go on; `stop_ids` end it."""

    def __init__(
        self,
        runtime: LlamaRuntime,
        params: SamplingParams,
        *,
        prompt: Sequence[int],
        matcher: llguidance.LLMatcher | None,
        eos_ids: Iterable[int],
    ) -> None:
        self._params = params
        self._matcher = matcher
        self._eos_ids = sorted(eos_ids)
        # vLLM's stop tokens: end-of-sequence (unless ignored) and the request's own; `min_tokens` bans them all.
        self.stop_ids = frozenset(() if params.ignore_eos else self._eos_ids) | frozenset(params.stop_token_ids)
        self._prompt = list(prompt)
        self._output: list[int] = []
        self.failure: str | None = None
        if matcher is not None:
            self._rng = np.random.default_rng(params.seed)
            return
        window = len(self._prompt) + params.max_tokens
        spec = ChainSpec(
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            min_p=params.min_p,
            seed=params.seed,
            logit_bias=tuple(sorted(params.logit_bias.items())),
            repetition_penalty=params.repetition_penalty,
            frequency_penalty=params.frequency_penalty,
            presence_penalty=params.presence_penalty,
            history=self._prompt if params.repetition_penalty != 1.0 else (),
            window=window,
        )
        self._chain = runtime.sampler(spec)
        # While `min_tokens` are not yet out: the same chain with the stop tokens banned (its twin is kept in step).
        self._early = None
        if params.min_tokens and self.stop_ids:
            banned = tuple(sorted({**params.logit_bias, **dict.fromkeys(self.stop_ids, -math.inf)}.items()))
            self._early = runtime.sampler(replace(spec, logit_bias=banned))

    def pick(self, runtime: LlamaRuntime, index: int) -> tuple[int, TokenLogprobs | None]:
        """The next token from batch row `index`, with its log-probabilities when the request asked for them."""
        want = self._params.logprobs
        raw = runtime.logits(index) if want is not None or self._matcher is not None else None
        token = self._pick_in_c(runtime, index) if raw is None or self._matcher is None else self._pick_constrained(raw)
        self._output.append(token)
        return token, (logprobs_of(raw, token, want) if want is not None else None)  # type: ignore[arg-type]

    def _pick_in_c(self, runtime: LlamaRuntime, index: int) -> int:
        if self._early is not None and len(self._output) < self._params.min_tokens:
            token = runtime.sample(self._early, index)
            runtime.accept(self._chain, token)  # the twin's penalties see the answer too
            return token
        return runtime.sample(self._chain, index)

    def _pick_constrained(self, raw: np.ndarray) -> int:
        assert self._matcher is not None
        logits = processed_logits(raw, self._params, prompt=self._prompt, output=self._output, ban=self._banned())
        allowed = self._allowed(logits.shape[0])
        if not np.isfinite(logits[allowed]).any():  # the ban left the grammar nothing (it must end): lift it
            logits = processed_logits(raw, self._params, prompt=self._prompt, output=self._output, ban=())
        logits[~allowed] = -np.inf
        token = draw(logits, self._params, self._rng)
        # End-of-sequence ends the request; the matcher never consumes it (as in structured_decoding.py).
        if self.failure is None and token not in self._eos_ids and not self._matcher.consume_tokens([token]):
            self.failure = f"grammar rejected a sampled token: {self._matcher.get_error()}"
        return token

    def _banned(self) -> frozenset[int]:
        return self.stop_ids if len(self._output) < self._params.min_tokens else frozenset()

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


def processed_logits(
    raw: np.ndarray, params: SamplingParams, *, prompt: Sequence[int], output: Sequence[int], ban: Iterable[int]
) -> np.ndarray:
    """vLLM's steps before temperature, in float64: logit bias, banned tokens to -inf, the repetition penalty over
    the prompt and the answer (positive logits divided, others multiplied), then frequency and presence penalties
    over the answer (`count * frequency + presence` subtracted)."""
    logits = raw.astype(np.float64)
    for token, bias in params.logit_bias.items():
        logits[token] += bias
    banned = list(ban)
    if banned:
        logits[banned] = -np.inf
    if params.repetition_penalty != 1.0:
        seen = np.unique(np.asarray([*prompt, *output], dtype=np.int64))
        values = logits[seen]
        logits[seen] = np.where(values > 0, values / params.repetition_penalty, values * params.repetition_penalty)
    if output and (params.frequency_penalty or params.presence_penalty):
        tokens, counts = np.unique(np.asarray(output, dtype=np.int64), return_counts=True)
        logits[tokens] -= counts * params.frequency_penalty + params.presence_penalty
    return logits


def draw_distribution(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The probabilities a draw takes from (temperature > 0): temperature, then min-p (tokens below `min_p` times the
    likeliest's probability go), top-k, then top-p (the smallest set of likeliest tokens whose mass reaches it)."""
    scaled = logits / params.temperature
    scaled = scaled - scaled[np.isfinite(scaled)].max()
    probs = np.exp(scaled)
    probs /= probs.sum()
    if params.min_p > 0:
        probs[probs < params.min_p * probs.max()] = 0.0
    if params.top_k > 0 and np.count_nonzero(probs) > params.top_k:
        kth = np.partition(probs, -params.top_k)[-params.top_k]
        probs[probs < kth] = 0.0
    probs /= probs.sum()
    if params.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        keep = np.cumsum(probs[order]) - probs[order] < params.top_p
        trimmed = np.zeros_like(probs)
        trimmed[order[keep]] = probs[order[keep]]
        probs = trimmed
    return probs / probs.sum()


def draw(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """Greedy at temperature 0; else a draw from `draw_distribution`."""
    if params.temperature <= 0:
        return int(np.argmax(logits))
    probs = draw_distribution(logits, params)
    return int(rng.choice(probs.size, p=probs))


def logprobs_of(raw: np.ndarray, token: int, top: int) -> TokenLogprobs:
    """The chosen token's log-probability under the raw logits, and the `top` likeliest tokens', best first."""
    logits = raw.astype(np.float64)
    shifted = logits - logits.max()
    log_total = math.log(float(np.exp(shifted).sum()))
    best: list[tuple[int, float]] = []
    if top:
        head = np.argpartition(-shifted, top - 1)[:top]
        head = head[np.argsort(-shifted[head], kind="stable")]
        best = [(int(t), float(shifted[t] - log_total)) for t in head]
    return TokenLogprobs(token_id=int(token), logprob=float(shifted[token] - log_total), top=best)

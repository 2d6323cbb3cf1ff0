"""llama.cpp in-process: one model, one context with a unified KV cache shared by many sequences, one batch.

The only module that touches the binding (cyllama: a prebuilt manylinux wheel of llama.cpp with its C API, so set-up
compiles nothing). Everything here runs on the engine thread: a llama context is not thread-safe.

Example::

    rt = LlamaRuntime(gguf_path, kv_cache_tokens=16_384, max_batch_tokens=512, max_sequences=48, threads=2)
    rows = rt.decode([(0, 0, prompt_ids, True)])      # one llama_decode; returns batch indices with logits
    token = rt.sample(rt.sampler(ChainSpec(temperature=0.0)), rows[0])
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpu_workers.llama_cpp.core_share import host_cores

# (sequence id, position of the first token, tokens, whether the last token's logits are wanted)
Row = tuple[int, int, Sequence[int], bool]


@dataclass(frozen=True)
class ChainSpec:
    """What a request's C sampler chain does (gpu_workers/llama_cpp/sampling.py builds it from SamplingParams)."""

    temperature: float
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    history: Sequence[int] = ()  # what the repetition penalty counts before the answer: the prompt
    window: int = 0  # how many tokens the penalties remember (prompt and answer): the longest request


class KvCacheFullError(RuntimeError):
    """llama_decode found no free KV cells for the batch (nothing of it was applied)."""


class LlamaRuntime:
    def __init__(
        self,
        gguf: Path,
        *,
        kv_cache_tokens: int,
        max_batch_tokens: int,
        max_sequences: int,
        threads: int | None = None,
        model: Any = None,  # an already loaded model of `gguf` (a second context on the same weights); None: load
    ) -> None:
        from cyllama.llama import llama_cpp as L

        self._L = L
        self.gguf = gguf
        L.disable_logging()
        L.ggml_backend_load_all()
        self._owns_model = model is None
        if model is None:
            model_params = L.LlamaModelParams()
            model_params.n_gpu_layers = 0
            model = _model_class(L)(str(gguf), model_params)
        self.model = model
        vocab = self.model.get_vocab()
        self.n_vocab = int(vocab.n_vocab)
        self.eos_id = int(vocab.token_eos())
        self.n_ctx_train = int(self.model.n_ctx_train)
        params = L.LlamaContextParams()
        params.n_ctx = kv_cache_tokens
        params.n_batch = max_batch_tokens
        params.n_ubatch = max_batch_tokens  # one ubatch per decode: a failed decode leaves nothing half-applied
        params.n_seq_max = max_sequences
        # One cell pool for every sequence, so seq_cp shares cells (prefix reuse costs no copy and no memory).
        params.kv_unified = True
        # Flash attention skips masked cells: a decode step does not pay for other sequences' tokens in the pool.
        params.flash_attn_type = 1
        n_threads = threads or host_cores()
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.no_perf = True
        self.ctx = L.LlamaContext(self.model, params)
        self.kv_cache_tokens = int(self.ctx.n_ctx)
        self.threads = n_threads
        self._batch = L.LlamaBatch(n_tokens=max_batch_tokens, embd=0, n_seq_max=1)
        self.max_batch_tokens = max_batch_tokens

    def decode(self, rows: Sequence[Row], every_logit: frozenset[int] = frozenset()) -> list[int]:
        """Run one llama_decode over every row; returns, per row that wants logits, its last token's batch index (for
        `sample`). Rows whose position in `rows` is in `every_logit` get logits for every token (prompt
        log-probabilities): their first token's index is `last - len(tokens) + 1`."""
        batch = self._batch
        batch.clear()
        outputs: list[int] = []
        index = 0
        for position, (seq, pos0, tokens, want) in enumerate(rows):
            last = len(tokens) - 1
            every = position in every_logit
            for j, token in enumerate(tokens):
                logits = every or (want and j == last)
                batch.add(int(token), pos0 + j, [seq], logits)
                if logits and j == last and want:
                    outputs.append(index)
                index += 1
        try:
            self.ctx.decode(batch)
        except ValueError as exc:
            if "KV slot" in str(exc) or "kv" in str(exc).lower():
                raise KvCacheFullError(str(exc)) from exc
            raise
        return outputs

    def set_threads(self, threads: int) -> None:
        """Run the next decodes on `threads` threads (core_share.py decides how many, step by step)."""
        if threads != self.threads:
            self.ctx.set_n_threads(threads, threads)
            self.threads = threads

    def sampler(self, spec: ChainSpec) -> Any:
        """A llama.cpp sampler chain for one request, in vLLM's order: logit bias, the repetition penalty (its
        history primed with `spec.history`, the prompt), frequency and presence penalties (the answer only), then
        greedy at temperature 0, else temperature, min-p, top-k, top-p and a draw from the request's own seeded
        generator. Each `sample` adds the chosen token to the penalties' history."""
        L = self._L
        chain = L.LlamaSampler(L.LlamaSamplerChainParams())
        if spec.logit_bias:
            chain.add_logit_bias(self.n_vocab, list(spec.logit_bias))
        if spec.repetition_penalty != 1.0:
            chain.add_penalties(spec.window, float(spec.repetition_penalty), 0.0, 0.0)
            for token in spec.history:  # before anything else joins the chain: only this link keeps them
                chain.accept(int(token))
        if spec.frequency_penalty or spec.presence_penalty:
            chain.add_penalties(spec.window, 1.0, float(spec.frequency_penalty), float(spec.presence_penalty))
        if spec.temperature <= 0:
            chain.add_greedy()
            return chain
        chain.add_temp(float(spec.temperature))
        if spec.min_p > 0:
            chain.add_min_p(float(spec.min_p), 1)
        if spec.top_k > 0:
            chain.add_top_k(int(spec.top_k))
        if spec.top_p < 1.0:
            chain.add_top_p(float(spec.top_p), 1)
        chain.add_dist(spec.seed if spec.seed is not None else random.getrandbits(32))
        return chain

    def sample(self, sampler: Any, index: int) -> int:
        """Sample from batch row `index`'s logits in C (no copy of the vocabulary into Python)."""
        return int(sampler.sample(self.ctx, index))

    @staticmethod
    def accept(sampler: Any, token: int) -> None:
        """Add a token chosen elsewhere to a chain's penalty history."""
        sampler.accept(int(token))

    def logits(self, index: int) -> np.ndarray:
        """Batch row `index`'s logits as numpy (a copy through a Python list: ~1.5 ms for SmolLM2's 49,152 tokens;
        only for grammar-masked rows and requests that want log-probabilities)."""
        row = self.ctx.get_logits_ith(index)
        return np.fromiter(row, dtype=np.float32, count=len(row))

    def copy_prefix(self, src: int, dst: int, n_tokens: int) -> None:
        self.ctx.memory_seq_cp(src, dst, 0, n_tokens)

    def forget(self, seq: int) -> None:
        self.ctx.memory_seq_rm(seq, -1, -1)

    def export_seq(self, seq: int) -> bytes:
        """`seq`'s KV (positions and cells) as bytes, for `import_seq` here or in a context of the same network."""
        return bytes(self.ctx.get_state_seq_data(seq))

    def import_seq(self, seq: int, state: bytes) -> None:
        """Load `export_seq`'s bytes into the (empty) sequence `seq`; ValueError when there are no free cells."""
        self.ctx.set_state_seq_data(state, seq)

    def sibling(self, *, kv_cache_tokens: int, max_batch_tokens: int, max_sequences: int) -> LlamaRuntime:
        """A second context on this runtime's model (no second copy of the weights), with its own KV cache."""
        return LlamaRuntime(
            self.gguf,
            kv_cache_tokens=kv_cache_tokens,
            max_batch_tokens=max_batch_tokens,
            max_sequences=max_sequences,
            threads=self.threads,
            model=self.model,
        )

    def close(self) -> None:
        self._batch.close()
        self.ctx.close()
        if self._owns_model:
            self.model.close()


def _model_class(L: Any) -> type:
    """cyllama 0.2's `get_logits_ith` reads `model.n_vocab`, which its LlamaModel lacks: a subclass provides it."""

    class Model(L.LlamaModel):  # type: ignore[misc,name-defined]
        @property
        def n_vocab(self) -> int:
            return int(self.get_vocab().n_vocab)

    return Model

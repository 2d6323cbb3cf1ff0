"""The llama.cpp peer of the engine bench: llama.cpp itself on the same GGUF, no fleetchat code, no server.

Two numbers, both through the library the engine bundles (cyllama's libllama, 2 threads on this machine):
- single stream: one `llama_decode` per token, greedy sampler in C (llama.cpp's `simple` example);
- batched: `streams` sequences in one context, every step one `llama_decode` with one token per sequence, each
  sequence drawing from its own seeded sampler chain (temperature, then dist): llama.cpp's `batched` example, the
  best our scheduler could do on these cores. On 2 cores it is arithmetic-bound (docs/engine.md): its aggregate is
  the ceiling our `streams`-stream aggregate is read against.

llama-cpp-python, when installed (a source build, so rarely), replaces the single-stream loop (what issue 25 measured).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def peer_single_stream(gguf: Path, prompt_ids: list[int], tokens: int, threads: int) -> tuple[float | None, str]:
    """Greedy decode tokens/s after the first token, and which peer ran."""
    try:
        return _llama_cpp_python(gguf, prompt_ids, tokens, threads), "llama-cpp-python (llama.cpp high-level API)"
    except ImportError:
        pass
    try:
        with _Peer(gguf, threads, sequences=1) as peer:
            return peer.single(prompt_ids, tokens), "llama.cpp simple loop (cyllama's libllama)"
    except ImportError as exc:
        return None, f"no llama.cpp peer could be loaded ({exc}); skipped"


def peer_batched(
    gguf: Path, prompts: Sequence[list[int]], tokens: int, threads: int, temperature: float = 0.8
) -> dict[str, Any] | None:
    """llama.cpp decoding every prompt as one sequence of one batch (seeded sampling, stop at end-of-sequence or
    `tokens`): generated tokens per second of wall time, prefill included (as the engine's aggregate counts it)."""
    try:
        with _Peer(gguf, threads, sequences=len(prompts)) as peer:
            return peer.batched(prompts, tokens, temperature)
    except ImportError:
        return None


def _llama_cpp_python(gguf: Path, prompt_ids: list[int], tokens: int, threads: int) -> float | None:
    from llama_cpp import Llama  # type: ignore[import-not-found]

    llm = Llama(str(gguf), n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False)
    llm.eval(prompt_ids)
    start = None
    for i in range(tokens):
        token = llm.sample(temp=0.0)
        if i == 0:
            start = time.perf_counter()
        llm.eval([token])
    return (tokens - 1) / (time.perf_counter() - start) if start else None


class _Peer:
    """One model and one context, as llama.cpp's examples set them up (flash attention on, unified KV)."""

    def __init__(self, gguf: Path, threads: int, *, sequences: int, n_ctx: int = 8192, n_batch: int = 2048) -> None:
        from cyllama.llama import llama_cpp as L

        self._L = L
        L.disable_logging()
        L.ggml_backend_load_all()
        model_params = L.LlamaModelParams()
        model_params.n_gpu_layers = 0

        class Model(L.LlamaModel):  # type: ignore[misc,name-defined]
            @property
            def n_vocab(self) -> int:  # cyllama 0.2's get_logits_ith reads it; its LlamaModel lacks it
                return int(self.get_vocab().n_vocab)

        self.model = Model(str(gguf), model_params)
        self.eos = int(self.model.get_vocab().token_eos())
        params = L.LlamaContextParams()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
        params.n_seq_max, params.kv_unified, params.flash_attn_type = max(1, sequences), True, 1
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        self.ctx = L.LlamaContext(self.model, params)
        self.batch = L.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1)

    def __enter__(self) -> _Peer:
        return self

    def __exit__(self, *_: object) -> None:
        self.batch.close()
        self.ctx.close()
        self.model.close()

    def _chain(self, temperature: float, seed: int) -> Any:
        chain = self._L.LlamaSampler(self._L.LlamaSamplerChainParams())
        if temperature <= 0:
            chain.add_greedy()
        else:
            chain.add_temp(temperature)
            chain.add_dist(seed)
        return chain

    def single(self, prompt_ids: list[int], tokens: int) -> float:
        greedy = self._chain(0.0, 0)
        self.batch.clear()
        for j, token in enumerate(prompt_ids):
            self.batch.add(token, j, [0], j == len(prompt_ids) - 1)
        self.ctx.decode(self.batch)
        index, position = len(prompt_ids) - 1, len(prompt_ids)
        start = time.perf_counter()
        for _ in range(tokens - 1):
            token = greedy.sample(self.ctx, index)
            self.batch.clear()
            self.batch.add(token, position, [0], True)
            self.ctx.decode(self.batch)
            index, position = 0, position + 1
        return (tokens - 1) / (time.perf_counter() - start)

    def batched(self, prompts: Sequence[list[int]], tokens: int, temperature: float) -> dict[str, Any]:
        chains = [self._chain(temperature, seed) for seed in range(len(prompts))]
        start = time.perf_counter()
        self.batch.clear()
        index: dict[int, int] = {}
        for seq, prompt in enumerate(prompts):
            for j, token in enumerate(prompt):
                self.batch.add(token, j, [seq], j == len(prompt) - 1)
            index[seq] = self.batch.n_tokens - 1
        self.ctx.decode(self.batch)
        position = {seq: len(prompt) for seq, prompt in enumerate(prompts)}
        generated = dict.fromkeys(index, 0)
        steps = 0
        while index:
            self.batch.clear()
            live: dict[int, int] = {}
            for seq, row in index.items():
                token = chains[seq].sample(self.ctx, row)
                generated[seq] += 1
                if token == self.eos or generated[seq] >= tokens:
                    continue
                live[seq] = self.batch.n_tokens
                self.batch.add(token, position[seq], [seq], True)
                position[seq] += 1
            index = live
            if live:
                self.ctx.decode(self.batch)
                steps += 1
        elapsed = time.perf_counter() - start
        total = sum(generated.values())
        return {"streams": len(prompts), "tokens": total, "steps": steps, "aggregate_tok_s": total / elapsed}

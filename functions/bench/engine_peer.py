"""The llama.cpp peer of the engine bench: plain single-stream decode of the same GGUF, no server, no batching.

Found, in order: llama-cpp-python (`llama_cpp`, what issue 25 measured; a source build, so rarely installed), else
llama.cpp's simple loop (one `llama_decode` per token, greedy sampler in C) through the same bundled library the
engine uses. Returns None with a note when neither loads.
"""

from __future__ import annotations

import time
from pathlib import Path


def peer_single_stream(gguf: Path, prompt_ids: list[int], tokens: int, threads: int) -> tuple[float | None, str]:
    """Greedy decode tokens/s after the first token, and which peer ran."""
    try:
        return _llama_cpp_python(gguf, prompt_ids, tokens, threads), "llama-cpp-python (llama.cpp high-level API)"
    except ImportError:
        pass
    try:
        return _simple_loop(gguf, prompt_ids, tokens, threads), "llama.cpp simple loop (cyllama's libllama)"
    except ImportError as exc:
        return None, f"no llama.cpp peer could be loaded ({exc}); skipped"


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


def _simple_loop(gguf: Path, prompt_ids: list[int], tokens: int, threads: int) -> float | None:
    from gpu_workers.llama_runtime import LlamaRuntime

    rt = LlamaRuntime(gguf, kv_cache_tokens=4096, max_batch_tokens=512, max_sequences=1, threads=threads)
    try:
        greedy = rt.sampler(temperature=0.0)
        index = rt.decode([(0, 0, prompt_ids, True)])[0]
        position = len(prompt_ids)
        start = time.perf_counter()
        for _ in range(tokens - 1):
            token = rt.sample(greedy, index)
            index = rt.decode([(0, position, [token], True)])[0]
            position += 1
        return (tokens - 1) / (time.perf_counter() - start)
    finally:
        rt.close()

"""The embedded engine on llama.cpp's batched API behind `Engine`: many sequences in one context (per-sequence KV in
a shared cell pool), continuous batching with chunked prefill in one `llama_decode` per step, block-hash prefix reuse
by copying cached sequence state, per-request sampling (seeded), llguidance grammar masks, abort on disconnect.

Tokenization and the chat template are the Hugging Face tokenizer's (gpu_workers/llama_cpp/gguf_tokenizer.py), exactly
what the transformers engine uses, so prompts, tool-call rendering and `continue_final_message` are the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from gpu_workers.chat_template import ChatTokenizing
from gpu_workers.engine import EXTENDED_SAMPLING, EngineError, EngineOutput, EngineStats, SamplingParams
from gpu_workers.llama_cpp.core_share import CoreShare, host_cores
from gpu_workers.llama_cpp.gguf_tokenizer import load_tokenizer
from gpu_workers.llama_cpp.runtime import LlamaRuntime
from gpu_workers.llama_cpp.sampling import GrammarCompiler
from gpu_workers.llama_cpp.scheduler import Job, Scheduler


class LlamaEngine(ChatTokenizing):
    # Every sampling parameter vLLM honours (gpu_workers/llama_cpp/sampling.py).
    honours = EXTENDED_SAMPLING

    def __init__(
        self,
        gguf: Path,
        *,
        model_name: str,
        max_model_len: int | None = None,
        kv_cache_tokens: int = 16_384,
        page_size: int = 16,
        max_batch_tokens: int = 512,
        max_running: int = 16,
        max_cached: int = 32,
        prefix_caching: bool = True,
        threads: int | None = None,  # None: a share of the host's cores, among its busy engines (core_share.py)
        show_progress: bool = True,
        weights: Path | None = None,  # the GGUF whose weights to load (gguf_weights.py); None: `gguf` itself
        decode_lane: bool = False,  # a second context for requests whose prompt is done (llama_decode_lane.py)
        decode_lane_kv_tokens: int = 8192,
    ) -> None:
        self.model_name = model_name
        with Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), disable=not show_progress
        ) as p:
            task = p.add_task(f"loading tokenizer for {gguf.name}", total=3)
            self._tokenizer = load_tokenizer(gguf)
            p.update(task, advance=1, description="loading weights and allocating the KV cache (llama.cpp)")
            self._runtime = LlamaRuntime(
                weights or gguf,
                kv_cache_tokens=kv_cache_tokens,
                max_batch_tokens=max_batch_tokens,
                max_sequences=max_running + max_cached,
                threads=threads or host_cores(),
            )
            lane = None
            if decode_lane:
                lane = self._runtime.sibling(
                    kv_cache_tokens=min(decode_lane_kv_tokens, kv_cache_tokens),
                    max_batch_tokens=max(32, max_running),  # it decodes one token a sequence a step
                    max_sequences=max_running,
                )
            self.vocab_size = self._runtime.n_vocab
            context = min(self._runtime.n_ctx_train, self._runtime.kv_cache_tokens)
            self.max_model_len = min(context, max_model_len) if max_model_len else context
            eos = {self._tokenizer.eos_token_id, self._runtime.eos_id}
            self._eos_ids = {int(e) for e in eos if e is not None}
            self._grammar = GrammarCompiler(self._tokenizer, self._eos_ids)
            p.update(task, advance=1, description="starting the batching thread")
            self._scheduler = Scheduler(
                self._runtime,
                max_running=max_running,
                max_cached=max_cached,
                eos_ids=self._eos_ids,
                max_model_len=self.max_model_len,
                page_size=page_size,
                prefix_caching=prefix_caching,
                core_share=None if threads else CoreShare(self._runtime.threads),
                lane=lane,
            )
            p.update(task, advance=1, description="engine ready")
        self._wake_lock = threading.Lock()
        self._handoffs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Handoff] = weakref.WeakKeyDictionary()

    # -- generation -------------------------------------------------------------------------------------------------

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[EngineOutput]:
        if not prompt_ids or not all(isinstance(t, int) and 0 <= t < self._runtime.n_vocab for t in prompt_ids):
            raise EngineError("prompt must be a non-empty list of token ids from the model's vocabulary")
        if not self._scheduler.is_running():
            raise EngineError("engine is not running")
        matcher: Any = None
        if params.json_schema is not None:
            try:  # compiled off the event loop
                matcher = await asyncio.to_thread(self._grammar.matcher_for, params.json_schema)
            except ValueError as exc:  # GrammarError: the worker checks schemas before this, so rarely reached
                raise EngineError(f"cannot constrain to this JSON schema: {exc}") from exc
        outputs: asyncio.Queue[EngineOutput | BaseException] = asyncio.Queue()
        wake = self._wake_for(asyncio.get_running_loop())

        def emit(item: EngineOutput | BaseException) -> None:  # engine thread
            wake(outputs.put_nowait, item)

        self._scheduler.submit(Job(request_id, list(prompt_ids), params, emit, matcher=matcher))
        finished = False
        try:
            while not finished:
                item = await outputs.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                finished = item.finished
                yield item
        finally:
            if not finished:  # client gone or stop string matched: free the sequence now
                self._scheduler.cancel(request_id)

    def _wake_for(self, loop: asyncio.AbstractEventLoop) -> Any:
        """Hand items to `loop` from the engine thread with one wake-up per burst: a step's outputs for 8 streams cost
        one `call_soon_threadsafe` (one write to the loop's self-pipe), not 8."""
        with self._wake_lock:
            handoff = self._handoffs.get(loop)
            if handoff is None:
                handoff = self._handoffs[loop] = _Handoff(loop)
            return handoff.put

    # -- observability ----------------------------------------------------------------------------------------------

    def stats(self) -> EngineStats:
        return self._scheduler.stats()

    def shutdown(self) -> None:
        self._scheduler.stop()


class _Handoff:
    """Callbacks queued from the engine thread for one event loop, run there in order by a single scheduled drain."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pending: list[tuple[Callable[[Any], None], Any]] = []
        self._lock = threading.Lock()

    def put(self, callback: Callable[[Any], None], item: Any) -> None:
        with self._lock:
            self._pending.append((callback, item))
            if len(self._pending) > 1:
                return  # a drain is already scheduled and has not run yet: it will take this one too
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody is waiting (the scheduler ignores this error)
            with self._lock:
                self._pending.clear()
            raise

    def _drain(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for callback, item in pending:
            with contextlib.suppress(Exception):  # one closed consumer must not lose the others' items
                callback(item)

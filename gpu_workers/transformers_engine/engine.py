"""The embedded engine: transformers continuous batching (paged KV cache, block-hash prefix sharing) behind `Engine`."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from gpu_workers.chat_template import ChatTokenizing
from gpu_workers.engine import EngineError, EngineOutput, EngineStats, SamplingParams
from gpu_workers.transformers_engine.structured_decoding import GrammarMasks

# Temperature 0 means greedy; the CB sampler always samples, so a tiny temperature makes the argmax certain.
GREEDY_TEMPERATURE = 1e-6


class TransformersEngine(ChatTokenizing):
    """Owns a `ContinuousBatchingManager` running in its background thread.

    Outputs come back on the engine thread; `register_result_handler` hops them onto our event loop.

    Its continuous-batching sampler takes temperature and top-p per request and nothing else, so it honours no
    extended sampling parameter: the worker refuses them with a 400 when this engine serves (the bench's and the hub's
    alternative; the local pools run llama.cpp).
    """

    honours: frozenset[str] = frozenset()

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        model_name: str,
        max_model_len: int | None = None,
        kv_cache_tokens: int = 32_768,
        page_size: int = 16,
        max_batch_tokens: int = 512,
        prefix_caching: bool = True,
        skip_noop_top_p: bool = True,
        show_progress: bool = True,
    ) -> None:
        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        self.model_name = model_name
        self._tokenizer = tokenizer
        context = int(getattr(model.config, "max_position_embeddings", 2048))
        self.max_model_len = min(context, max_model_len) if max_model_len else context
        self.vocab_size = int(model.config.vocab_size)
        eos = {tokenizer.eos_token_id} | set(_as_list(getattr(model.generation_config, "eos_token_id", None)))
        self._eos_ids = {e for e in eos if e is not None}
        generation_config = GenerationConfig(
            do_sample=True,
            # Non-default values make transformers build the temperature and top-p processors; per-request
            # kwargs then override them row by row.
            temperature=0.7,
            top_p=0.95,
            top_k=None,  # OpenAI has no top-k; a default of 50 would silently truncate every distribution
            max_new_tokens=256,
            eos_token_id=sorted(self._eos_ids),
            pad_token_id=tokenizer.pad_token_id,
        )
        cb_config = ContinuousBatchingConfig(
            page_size=page_size,
            num_blocks=max(kv_cache_tokens // page_size, 64),
            max_batch_tokens=max_batch_tokens,
            allow_block_sharing=prefix_caching,
            per_request_processors=True,
            # Grammar masks need each request's previous token before its next logits; async double-buffering
            # (a CUDA-graph option, off on CPU anyway) would prepare a step before the last one's tokens are known.
            use_async_batching=False,
        )
        with Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), disable=not show_progress
        ) as p:
            task = p.add_task("allocating paged KV cache and starting the batching thread", total=1)
            self._manager = model.init_continuous_batching(
                generation_config=generation_config, continuous_batching_config=cb_config
            )
            processors = self._manager.logit_processor.logits_processor
            if skip_noop_top_p:
                _skip_top_p_when_unused(processors)
            # First, so temperature and top-p only ever see the tokens the grammar allows.
            self._grammar = GrammarMasks(tokenizer, self._eos_ids, self._rows_sampling)
            processors.insert(0, self._grammar)
            self._manager.start()
            deadline = time.monotonic() + 120
            while self._manager.batch_processor is None:
                if not self._manager.is_running() or time.monotonic() > deadline:
                    raise EngineError("continuous batching thread failed to start")
                time.sleep(0.01)
            p.update(task, advance=1, description="engine ready")
        self._cache = self._manager.batch_processor.cache
        self._scheduler = self._manager.batch_processor.scheduler
        self._prefix_lock = threading.Lock()
        self._cached_by_request: dict[str, int] = {}
        self._prefix_queries = 0
        self._prefix_hits = 0
        self._hook_prefix_matching()

    def _rows_sampling(self) -> list[Any]:
        """The current batch's request states that sample a token this step, in logits-row order (engine thread)."""
        batch = self._manager.batch_processor.inputs_and_outputs.requests_in_batch
        return [future.state for future in batch if future.has_new_token]

    def _hook_prefix_matching(self) -> None:
        """Record how many prompt tokens each request found in the prefix cache (vLLM's queries/hits counters)."""
        original = self._cache.search_prefix_match

        def search_prefix_match(request_id: str, prompt_ids: list[int]) -> int:
            matched = original(request_id, prompt_ids)
            with self._prefix_lock:
                # A request still pending is searched again next step; keep only its latest answer.
                self._cached_by_request[request_id] = matched
            return matched

        self._cache.search_prefix_match = search_prefix_match

    # -- generation ---------------------------------------------------------------------------------------------

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[EngineOutput]:
        from transformers.generation.continuous_batching import RequestStatus

        if not prompt_ids or not all(isinstance(t, int) for t in prompt_ids):
            # A bad request inside the batching loop fails every request in flight: refuse it here.
            raise EngineError("prompt must be a non-empty list of token ids")
        if not self._manager.is_running():
            raise EngineError("engine is not running")
        if params.json_schema is not None:
            try:  # compiled off the event loop; tracked here, so a request cancelled meanwhile leaves nothing behind
                matcher = await asyncio.to_thread(self._grammar.matcher_for, params.json_schema)
            except ValueError as exc:  # GrammarError: the worker checks schemas before this, so rarely reached
                raise EngineError(f"cannot constrain to this JSON schema: {exc}") from exc
            self._grammar.track(request_id, matcher, len(prompt_ids))
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._manager.register_result_handler(request_id, queue.put_nowait)
        temperature = params.temperature if params.temperature > 0 else GREEDY_TEMPERATURE
        try:
            self._manager.add_request(
                prompt_ids,
                request_id=request_id,
                max_new_tokens=params.max_tokens,
                streaming=True,
                temperature=float(temperature),
                top_p=float(params.top_p),
            )
        except BaseException:
            self._grammar.discard(request_id)
            raise
        sent = 0
        finished = False
        try:
            while not finished:
                output = await queue.get()
                if output.status == RequestStatus.FAILED:
                    raise EngineError(output.error or "generation failed")
                tokens = list(output.generated_tokens)
                new, sent = tokens[sent:], len(tokens)
                finished = output.is_finished()
                reason = None
                if finished and (failure := self._grammar.discard(request_id)) is not None:
                    raise EngineError(failure)
                if finished:
                    reason = "stop" if tokens and tokens[-1] in self._eos_ids else "length"
                    new = [t for t in new if t not in self._eos_ids] if reason == "stop" else new
                yield EngineOutput(
                    new_token_ids=new,
                    finished=finished,
                    finish_reason=reason,
                    cached_tokens=self._cached_by_request.get(request_id, 0),
                    generated_total=len(tokens),
                )
        finally:
            self._grammar.discard(request_id)
            if not finished:
                self._manager.cancel_request(request_id)
                with self._manager.output_router._lock:
                    self._manager.output_router.result_handlers.pop(request_id, None)
            with self._prefix_lock:
                cached = self._cached_by_request.pop(request_id, 0)
                self._prefix_queries += len(prompt_ids)
                self._prefix_hits += cached

    # -- observability ------------------------------------------------------------------------------------------

    def stats(self) -> EngineStats:
        waiting = self._manager.input_queue.qsize() + len(self._scheduler.waiting_requests)
        try:
            usage = 1.0 - float(self._cache.compute_free_capacity())
        except Exception:  # read races the engine thread mutating the pool; a scrape must never fail
            usage = 0.0
        with self._prefix_lock:
            queries, hits = self._prefix_queries, self._prefix_hits
        return EngineStats(
            running=len(self._scheduler.active_requests),
            waiting=waiting,
            kv_cache_usage=min(max(usage, 0.0), 1.0),
            prefix_cache_queries=queries,
            prefix_cache_hits=hits,
        )

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self._manager.stop(block=True, timeout=10)


def _skip_top_p_when_unused(processors: list[Any]) -> None:
    """Give the per-request top-p warper a fast path: when no row in the batch asks for top_p < 1 it is a no-op,
    yet it would still sort the whole vocabulary for every row on every step."""
    import torch
    from transformers.generation.continuous_batching.cb_logits_processors import (
        ContinuousBatchingTopPLogitsWarper,
    )

    class TopPWhenAsked(ContinuousBatchingTopPLogitsWarper):
        def __call__(self, scores: torch.Tensor, tensor_arg: torch.Tensor) -> torch.Tensor:
            top_p = tensor_arg[: scores.size(0)].view(dtype=torch.float32)
            if bool((top_p >= 1.0).all()):
                return scores
            return super().__call__(scores, tensor_arg)

    for i, processor in enumerate(processors):
        if type(processor) is ContinuousBatchingTopPLogitsWarper:
            fast = TopPWhenAsked.__new__(TopPWhenAsked)
            fast.__dict__.update(processor.__dict__)
            processors[i] = fast


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple, set)) else [value]

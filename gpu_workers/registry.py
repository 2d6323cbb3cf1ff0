"""Model registry: turn a pool name into a running engine (the local, embedded one the pool table names)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from gpu_workers.engine import Engine
from gpu_workers.llama_cpp.gguf_weights import WeightLayout, weights_for
from gpu_workers.model_loader import ModelSource, packaged_gguf_source
from shared.fleet.tables import get_pool

EngineKind = Literal["llama_cpp", "transformers"]
# KV capacity when none is given: llama.cpp allocates its whole cell pool up front (23 KB a token for SmolLM2-135M
# in f16), so it gets half of what the transformers engine's paged blocks get (those are fp32 and grown lazily).
DEFAULT_KV_CACHE_TOKENS: dict[str, int] = {"llama_cpp": 16_384, "transformers": 32_768}


class EngineOptions(BaseModel):
    max_model_len: int | None = Field(default=None, ge=256)
    kv_cache_tokens: int | None = Field(default=None, ge=1024)  # None: the engine's default above
    page_size: int = Field(default=16, ge=8)
    max_batch_tokens: int = Field(default=512, ge=64)
    prefix_caching: bool = True
    # Load from the hub (the pool's deployed model) instead of the packaged GGUF; needs network access.
    from_hub: bool = False
    # Overrides the pool table's `local.engine` (the bench runs both side by side).
    engine: EngineKind | None = None
    # Overrides the pool table's `local.llama_weights` (the bench measures both layouts).
    llama_weights: WeightLayout | None = None
    # False: no decode lane even where the pool table names one (the bench measures both).
    decode_lane: bool = True
    # The llama.cpp engine's threads, fixed; None: its share of the host's cores among the engines generating at the
    # moment (gpu_workers/llama_cpp/core_share.py).
    threads: int | None = Field(default=None, ge=1)


def model_source_for(pool_name: str, *, from_hub: bool = False) -> ModelSource:
    pool = get_pool(pool_name)
    if pool is None:
        raise KeyError(f"unknown pool {pool_name!r}")
    if from_hub:
        return ModelSource(path_or_repo=pool.deployed.hf_repo, revision=pool.deployed.revision)
    if pool.local is None:
        raise KeyError(f"pool {pool_name!r} is served deployed only: it has no local model")
    return packaged_gguf_source(pool.local)


def engine_kind_for(pool_name: str, options: EngineOptions) -> EngineKind:
    """The engine that serves a pool: the options' override, else the pool table's; hub models need transformers."""
    pool = get_pool(pool_name)
    if pool is None:
        raise KeyError(f"unknown pool {pool_name!r}")
    if options.from_hub:
        return "transformers"
    if pool.local is None:
        raise KeyError(f"pool {pool_name!r} is served deployed only: it has no local model")
    return options.engine or pool.local.engine


def build_engine(pool_name: str, options: EngineOptions, *, show_progress: bool = True) -> Engine:
    kind = engine_kind_for(pool_name, options)
    source = model_source_for(pool_name, from_hub=options.from_hub)
    common: dict[str, Any] = {  # what both engines take alike
        "model_name": pool_name,
        "max_model_len": options.max_model_len,
        "kv_cache_tokens": options.kv_cache_tokens or DEFAULT_KV_CACHE_TOKENS[kind],
        "page_size": options.page_size,
        "max_batch_tokens": options.max_batch_tokens,
        "prefix_caching": options.prefix_caching,
        "show_progress": show_progress,
    }
    if kind == "llama_cpp":
        from gpu_workers.llama_cpp.engine import LlamaEngine

        gguf = Path(source.path_or_repo) / str(source.gguf_file)
        local = get_pool(pool_name).local  # type: ignore[union-attr]
        weights = weights_for(gguf, options.llama_weights or local.llama_weights)
        lane = local.llama_decode_lane and options.decode_lane
        return LlamaEngine(
            gguf,
            weights=weights,
            decode_lane=lane,
            decode_lane_kv_tokens=local.llama_decode_lane_tokens,
            threads=options.threads,
            **common,
        )
    from gpu_workers.model_loader import load_model_and_tokenizer
    from gpu_workers.transformers_engine.engine import TransformersEngine

    model, tokenizer = load_model_and_tokenizer(source, show_progress=show_progress)
    return TransformersEngine(model, tokenizer, **common)

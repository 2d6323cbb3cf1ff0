"""Model registry: turn a pool name into a running engine (the local, embedded one)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from gpu_workers.model_loader import ModelSource, load_model_and_tokenizer, packaged_gguf_source
from gpu_workers.transformers_engine import TransformersEngine
from shared.pools import get_pool


class EngineOptions(BaseModel):
    max_model_len: int | None = Field(default=None, ge=256)
    kv_cache_tokens: int = Field(default=32_768, ge=1024)
    page_size: int = Field(default=16, ge=8)
    max_batch_tokens: int = Field(default=512, ge=64)
    prefix_caching: bool = True
    # Load from the hub (the pool's deployed model) instead of the packaged GGUF; needs network access.
    from_hub: bool = False


def model_source_for(pool_name: str, *, from_hub: bool = False) -> ModelSource:
    pool = get_pool(pool_name)
    if pool is None:
        raise KeyError(f"unknown pool {pool_name!r}")
    if from_hub:
        return ModelSource(path_or_repo=pool.deployed.hf_repo, revision=pool.deployed.revision)
    return packaged_gguf_source(pool.local)


def build_engine(pool_name: str, options: EngineOptions, *, show_progress: bool = True) -> TransformersEngine:
    source = model_source_for(pool_name, from_hub=options.from_hub)
    model, tokenizer = load_model_and_tokenizer(source, show_progress=show_progress)
    return TransformersEngine(
        model,
        tokenizer,
        model_name=pool_name,
        max_model_len=options.max_model_len,
        kv_cache_tokens=options.kv_cache_tokens,
        page_size=options.page_size,
        max_batch_tokens=options.max_batch_tokens,
        prefix_caching=options.prefix_caching,
        show_progress=show_progress,
    )

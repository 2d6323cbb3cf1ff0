"""The classifier's text encoder at run time: MiniLM's tokenizer and its distilled per-token vectors (numpy only)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

MODEL_DIR = Path(__file__).parent.parent / "model"
TOKENIZER_FILE = "tokenizer.json"
VECTORS_FILE = "token_vectors.npy"


class TokenTable:
    """Text -> token ids -> one vector per token (all-MiniLM-L6-v2 distilled, see `distill.py`).

    A span's embedding is the mean and the element-wise max of its tokens' vectors, each L2-normalised: a static
    (model2vec-style) sentence embedding that costs a table lookup instead of a transformer pass. The max keeps a
    single strongly-charged word from being averaged away."""

    def __init__(self, tokenizer: Tokenizer, vectors: np.ndarray) -> None:
        self.tokenizer = tokenizer
        self.vectors = vectors.astype(np.float32)
        self.width = int(vectors.shape[1])
        self.dim = 2 * self.width  # mean and max

    @classmethod
    def load(cls, directory: Path = MODEL_DIR) -> TokenTable:
        tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return cls(tokenizer, np.load(directory / VECTORS_FILE))

    def ids(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int64)

    def encode(self, text: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """Token ids and each token's (start, end) character offsets in `text`."""
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        return np.asarray(encoding.ids, dtype=np.int64), encoding.offsets

    def ids_batch(self, texts: list[str]) -> list[np.ndarray]:
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int64) for e in encodings]

    def embed_ids(self, ids: np.ndarray) -> np.ndarray:
        """[mean, max] of `ids`' vectors, each normalised (zeros for no tokens)."""
        if ids.size == 0:
            return np.zeros(self.dim, np.float32)
        vectors = self.vectors[ids]
        return np.concatenate([_unit(vectors.mean(axis=0)), _unit(vectors.max(axis=0))])

    def embed_windows(self, ids: np.ndarray, size: int, stride: int) -> np.ndarray:
        """One [mean, max] embedding per window of `size` tokens every `stride` tokens (the last ends at the end)."""
        if ids.size <= size:
            return self.embed_ids(ids)[None, :]
        starts = np.asarray([*range(0, ids.size - size, stride), ids.size - size])
        windows = np.lib.stride_tricks.sliding_window_view(self.vectors[ids], size, axis=0)[starts]  # [n, width, size]
        return np.concatenate([_unit(windows.mean(axis=2)), _unit(windows.max(axis=2))], axis=1)


@cache
def shipped_token_table() -> TokenTable:
    """The repo's token table, loaded once per process: the classifier and the injection screen share it."""
    return TokenTable.load(MODEL_DIR)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-6)

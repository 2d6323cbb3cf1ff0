"""The prompt-injection screen: reads text the user did not write (a retrieved passage, a tool's result, a tool call's
arguments) for an instruction planted in it, window by window, in well under a millisecond per passage.

Each 64-token window (every 32 tokens) is read as the safety classifier's first stage reads a span: its token-table
embedding (all-MiniLM-L6-v2 distilled into per-token vectors: mean and max, numpy only) and its hashed word-piece and
character n-grams (tf x idf); a logistic head trained on public injection data scores it
(BIPIA's training split; functions.offline.injection_data.train_screen.py); a passage's score is its most
suspicious window's, so an instruction buried in a long benign document is not averaged away. The threshold was set
on held-out validation data for few benign passages flagged (docs/safety.md, "Untrusted text")."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from functions.safety.classifier.ngrams import sparse_rows
from functions.safety.classifier.token_table import MODEL_DIR, TokenTable, shipped_token_table

WEIGHTS_FILE = "injection.npz"
META_FILE = "injection.json"
WINDOW_TOKENS = 64
WINDOW_STRIDE = 32


class InjectionMeta(BaseModel):
    threshold: float = Field(ge=0.0, le=1.0)  # flag a text whose most suspicious window scores this or more
    version: str  # content hash of the weights: part of an audit record
    trained_on: list[str]  # the sources (and splits) the head was fitted on


def window_starts(tokens: int) -> list[int]:
    """Where each window begins: every WINDOW_STRIDE tokens, the last one ending at the end."""
    if tokens <= WINDOW_TOKENS:
        return [0]
    return [*range(0, tokens - WINDOW_TOKENS, WINDOW_STRIDE), tokens - WINDOW_TOKENS]


class InjectionScreen:
    def __init__(
        self, table: TokenTable, dense: np.ndarray, sparse: np.ndarray, bias: float, idf: np.ndarray,
        meta: InjectionMeta,
    ) -> None:  # fmt: skip
        self.table, self.meta = table, meta
        self.dense, self.sparse, self.bias, self.idf = dense.astype(np.float32), sparse.astype(np.float32), bias, idf

    @classmethod
    def load(cls, directory: Path = MODEL_DIR, table: TokenTable | None = None) -> InjectionScreen:
        a = np.load(directory / WEIGHTS_FILE)
        meta = InjectionMeta.model_validate(json.loads((directory / META_FILE).read_text(encoding="utf-8")))
        table = table or TokenTable.load(directory)
        return cls(table, a["dense"], a["sparse"], float(a["bias"]), a["idf"].astype(np.float32), meta)

    def windows(self, text: str) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
        """(dense rows, sparse rows): one per window of the text's tokens (one for a short text)."""
        ids, offsets = self.table.encode(text)
        dense = self.table.embed_windows(ids, WINDOW_TOKENS, WINDOW_STRIDE)
        spans = []
        for start in window_starts(ids.size):
            end = min(start + WINDOW_TOKENS, ids.size)
            chars = text[offsets[start][0] : offsets[end - 1][1]] if end > start else ""
            spans.append((ids[start:end], chars))
        return dense, sparse_rows(spans, self.idf)

    def score(self, text: str) -> float:
        """P(the text carries an injected instruction): its most suspicious window's."""
        if not text.strip():
            return 0.0
        dense, sparse = self.windows(text)
        logits = dense @ self.dense + self.bias + np.asarray([float(self.sparse[i] @ v) for i, v in sparse])
        return float(1.0 / (1.0 + np.exp(-float(logits.max()))))

    def flagged(self, text: str) -> bool:
        return self.score(text) >= self.meta.threshold


@cache
def shipped_injection_screen() -> InjectionScreen:
    """The screen shipped in functions/safety/model (loaded once per process)."""
    return InjectionScreen.load(table=shipped_token_table())
